"""Hotspot slicing: op calls ranked by GPU time, grouped, classified, deduplicated and selected."""
