"""A slice's kept candidate measurements, `measured/<key>.json`, keyed by the candidate's sources and the measurement
settings: the loop reuses them, the report and bench/fidelity.py read the final pair's."""

from __future__ import annotations

from pathlib import Path

from vxsynth.store.io import read_json, sha256_obj


def measured_key(cuda_sha256: str, vortex_sha256: str, measured_with: dict) -> str:
    """The name (under the slice's `measured/`) of a candidate's kept measurement: its sources and the settings."""
    return sha256_obj([cuda_sha256, vortex_sha256, measured_with])[:20]


def final_measurement(slice_dir: Path, cuda_sha256: str, vortex_sha256: str, measured_with: dict) -> dict | None:
    """The kept measurement of a slice's final pair (its sources' hashes, measured as `measured_with` says); None when
    the run kept none."""
    path = slice_dir / "measured" / f"{measured_key(cuda_sha256, vortex_sha256, measured_with)}.json"
    return read_json(path) if path.exists() else None
