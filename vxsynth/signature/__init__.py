"""The ten-component profile signature, gaps and the distance D."""
