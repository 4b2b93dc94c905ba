"""Paired kernel generation: one strategy, emitted as CUDA and as Vortex."""
