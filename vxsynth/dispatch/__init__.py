"""The PyTorch replacement entry: calls matching a slice dispatch to its generated kernel."""
