"""The ten signature components and the Nsight Compute metrics they are computed from: the ground floor that profiling,
signature, the store's schemas and the report all read (it imports nothing of vxsynth)."""
