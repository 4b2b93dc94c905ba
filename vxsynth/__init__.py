"""vxsynth: rebuild GPU benchmarks from robot-learning policies as CUDA + Vortex kernel pairs."""

__version__ = "0.1.0"
