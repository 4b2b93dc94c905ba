"""Prefect flows: each chains thin tasks over the core package; configs come from Hydra's compose API."""
