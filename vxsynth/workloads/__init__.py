"""Workloads: lerobot policies built offline with seeded random weights, and their inputs."""

from vxsynth.workloads.spec import WorkloadSpec

__all__ = ["WorkloadSpec"]
