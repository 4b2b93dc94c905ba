"""Agents propose the next strategy edit of a reconstruction round."""
