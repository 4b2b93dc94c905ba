"""The suite report."""
