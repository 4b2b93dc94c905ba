"""Profiling: pass 1 (torch.profiler: where GPU time goes) and pass 2 (Nsight Compute: how hot kernels use the GPU)."""
