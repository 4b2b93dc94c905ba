"""The two output checks (CUDA vs reference op; CUDA vs Vortex), tolerance judgement and replay."""
