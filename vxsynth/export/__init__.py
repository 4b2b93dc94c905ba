"""Exports of what the pipeline recorded, for uses outside it (agent training)."""
