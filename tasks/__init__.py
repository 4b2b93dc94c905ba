"""Thin Prefect task wrappers around the core package."""
