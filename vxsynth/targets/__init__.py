"""Executors: CUDA (nvcc + CuPy, in a subprocess), Vortex host-functional, RISC-V cross-compile check, SimX."""
