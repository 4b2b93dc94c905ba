"""Reconstruction of a slice: the loop, and how it is set up from configuration."""
