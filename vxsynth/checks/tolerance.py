"""Elementwise combined judgement |a - b| <= atol + rtol * |b| (+ a per-element bound, e.g. the rounding-error bound
of an accumulation), b being the side matched, with NaN/Inf rules.

Non-finite values pass only when both sides hold the same one (NaN with NaN, +Inf with +Inf); a NaN where the other
side is finite fails, which is how an output buffer the kernel never wrote (filled with NaN) is caught.
"""

from __future__ import annotations

import numpy as np

from vxsynth.errors import VxError

GROWTHS = ("sqrt(K)", "K")   # how check 2's accumulation bound grows with the reduction length


def judge(a: np.ndarray, b: np.ndarray, atol: float, rtol: float, *, mask: np.ndarray | None = None, sample: int = 8,
          bound: np.ndarray | None = None) -> dict:
    """Verdict of `a` against `b` over `mask` (all elements when None)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return {"pass": False, "error": f"shape {list(a.shape)} != {list(b.shape)}", "compared": 0}
    m = np.ones(a.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(a.shape)
    n = int(m.sum())
    if n == 0:
        return {"pass": False, "error": "no element compared", "compared": 0}
    fa, fb = np.isfinite(a), np.isfinite(b)
    same_nonfinite = (~fa & ~fb) & ((np.isnan(a) & np.isnan(b)) | (a == b))
    with np.errstate(invalid="ignore"):
        diff = np.where(fa & fb, np.abs(a - b), np.inf)
        allowed = atol + rtol * np.abs(np.where(fb, b, 0.0)) + (0.0 if bound is None else np.asarray(bound).reshape(a.shape))
        ok = (diff <= allowed) | same_nonfinite
        ratio = np.where(same_nonfinite, 0.0, diff / allowed)
    fails = m & ~ok
    both = m & fa & fb
    max_abs = float(diff[both].max()) if both.any() else float("nan")
    rel = np.abs(a[both] - b[both]) / np.maximum(np.abs(b[both]), 1e-30) if both.any() else np.array([np.nan])
    ratio_m = np.where(m, ratio, -1.0)
    worst_idx = np.argsort(ratio_m, axis=None)[::-1][:sample]
    worst = []
    for flat in worst_idx:
        if not m.flat[flat]:
            continue
        idx = np.unravel_index(flat, a.shape)
        worst.append({"index": [int(i) for i in idx], "value": _f(a.flat[flat]), "reference": _f(b.flat[flat]),
                      "abs_err": _f(diff.flat[flat]), "allowed": _f(allowed.flat[flat])})
    return {"pass": bool(not fails.any()), "compared": n, "failing": int(fails.sum()),
            "fail_fraction": float(fails.sum() / n), "max_abs_err": max_abs, "max_rel_err": float(np.max(rel)),
            "non_finite_mismatch": int((m & ~(fa & fb) & ~same_nonfinite).sum()), "atol": atol, "rtol": rtol,
            "worst": worst}


def _f(x) -> float | str:
    x = float(x)
    return x if np.isfinite(x) else str(x)


def validate(policy: dict) -> None:
    """A precision policy (conf/precision: path -> check1/check2 tolerances) judged before any run; one line names
    what is wrong."""
    for path, checks in policy.items():
        for kind in ("check1", "check2"):
            t = (checks or {}).get(kind) if isinstance(checks, dict) else None
            if not isinstance(t, dict):
                raise VxError(f"precision.{path}.{kind} is missing; give atol and rtol (conf/precision/default.yaml)")
            for k in ("atol", "rtol", *(("accum",) if kind == "check2" else ())):
                v = t.get(k)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise VxError(f"precision.{path}.{kind}.{k}={v!r} must be a number >= 0, e.g. "
                                  f"precision.{path}.{kind}.{k}=0.001")
        growth = checks["check2"].get("accum_growth", "K")
        if growth not in GROWTHS:
            raise VxError(f"precision.{path}.check2.accum_growth={growth!r}: use one of {', '.join(GROWTHS)}")
