"""Prefect flows: each chains thin tasks over the core package; configs come from Hydra's compose API.

Importing this package (before Prefect) sets the embedded defaults: Prefect's local API keeps its SQLite database in
the project's `.prefect/`, and sends no telemetry (the machines may have no network)."""

import os

from flows.config import ROOT

os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
