"""The loop's settings and the slice records it runs on, checked from the plain config. Light imports (no torch,
pandas or targets): commands check them before any orchestration, and bad input is answered fast."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from pathlib import Path

from vxsynth.errors import VxError
from vxsynth.kernels.strategy import CONV_FORMS, LAYOUTS, MAPPINGS, MMAS, RASTERS, Strategy
from vxsynth.records import SliceRecord

# the strategy fields that take one of a few names
CHOICES = {"mapping": MAPPINGS, "conv_form": CONV_FORMS, "layout": LAYOUTS, "mma": MMAS, "raster": RASTERS}
# conf/loop keys that the measurement set-up reads (`reconstruct.setup.loop_env`), not the loop itself
MEASUREMENT_KEYS = ("measure_in", "reference_repeats")


@dataclass
class LoopConfig:
    rounds: int = 12
    wall_s: float = 900.0
    threshold: float = 0.005
    order: str = "cuda_first"
    seed: int = 0
    initial: dict = field(default_factory=dict)
    start: dict = field(default_factory=dict)     # conf/start: the structure-informed start's rules ({}: default start)
    sanitize: bool = True                         # compute-sanitizer memcheck + racecheck before a revision is kept
    batch: int = 1                                # candidates proposed and evaluated together per round
    workers: int = 0                              # CPU pool for generating, building and checking a batch (0: all cores)
    gap_guard: float | None = None                # keep no revision with a component's |gap| above the start's by more
                                                  # than this or that component's measured noise (None: off)

    @classmethod
    def from_dict(cls, d: dict) -> "LoopConfig":
        """The settings, each checked against its field's type (a bad value or an unknown key is a one-line VxError
        naming it)."""
        known = (*cls.__dataclass_fields__, *MEASUREMENT_KEYS)
        for k in d:
            if k not in known:
                raise VxError(f"loop.{k}: no such loop setting; use one of "
                              f"{', '.join(n for n in known if n != 'start')} (conf/loop/default.yaml)")
        kinds = {"int": int, "float": (int, float), "str": str, "bool": bool, "dict": dict}
        for k, v in d.items():
            f = cls.__dataclass_fields__.get(k)
            want = kinds.get(str(f.type)) if f else None
            if want and (not isinstance(v, want) or (want is int and isinstance(v, bool))):
                raise VxError(f"loop.{k}={v!r} must be {f.type}, e.g. loop.{k}={f.default if f.default_factory is MISSING else '{}'}")
        for k, least, eg in (("batch", 1, 8), ("rounds", 0, 12), ("workers", 0, 0), ("wall_s", 1, 900), ("threshold", 0, 0.005)):
            if k in d and not d[k] >= least:        # NaN too
                raise VxError(f"loop.{k}={d[k]} must be at least {least}, e.g. loop.{k}={eg}")
        g = d.get("gap_guard")
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or g < 0):
            raise VxError(f"loop.gap_guard={g!r} must be null (off) or a gap tolerance >= 0, e.g. loop.gap_guard=0.005")
        if d.get("order", "cuda_first") not in ("cuda_first", "vortex_first"):
            raise VxError(f"loop.order={d['order']!r}: use cuda_first or vortex_first")
        r = d.get("reference_repeats")
        if "reference_repeats" in d and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            raise VxError(f"loop.reference_repeats={r!r} must be a whole number of at least 1, e.g. loop.reference_repeats=3")
        for k, v in (d.get("initial") or {}).items():
            f = Strategy.__dataclass_fields__.get(k)
            if f is None:
                raise VxError(f"loop.initial.{k}: not a strategy field; use one of {', '.join(Strategy.__dataclass_fields__)}")
            if type(v) is not type(f.default):
                raise VxError(f"loop.initial.{k}={v!r} must be {type(f.default).__name__}, e.g. +loop.initial.{k}={f.default}")
            if k in CHOICES and v not in CHOICES[k]:
                raise VxError(f"loop.initial.{k}={v!r}: use one of {', '.join(CHOICES[k])}")
        return cls(**{k: v for k, v in d.items() if k not in MEASUREMENT_KEYS})


def loop_config(cfg: dict) -> LoopConfig:
    """The loop's settings from the composed config: conf/loop plus the start rules of conf/start."""
    return LoopConfig.from_dict({**cfg["loop"], "start": cfg.get("start") or {}})


def records_in(slices_dir: Path, ids: list[str] | None = None, regenerate: str = "`vxsynth slice`") -> list[SliceRecord]:
    """Slice records (all, or the given ids / unique id prefixes) from a slices directory. A damaged record is a
    VxError that names the command regenerating the records (`regenerate`)."""
    found = sorted(p.parent.name for p in Path(slices_dir).glob("*/slice.json"))
    if not found:
        raise VxError(f"no slice records under {slices_dir}; run {regenerate} first")
    pick = found if not ids else []
    for i in ids or []:
        m = [f for f in found if f == i] or [f for f in found if f.startswith(i)]
        if len(m) != 1:
            raise VxError(f"slice {i!r} matches {len(m)} slices; give a unique id or prefix (`vxsynth slices` lists them)")
        pick.append(m[0])
    recs = []
    for s in pick:
        path = Path(slices_dir) / s / "slice.json"
        recs.append(SliceRecord.load(path, f"regenerate the slice records with {regenerate}"))
    return recs
