"""`vxsynth reproduce <hash>`: locate a slice by its DVC hash (any commit), restore it, rerun its downstream stage
(reconstruction) alone in a scratch directory, and compare with what that revision recorded.

Where a revision's slice manifest is in neither the DVC cache nor a remote (a fresh clone), the slice records are
regenerated from the committed recorded profiles and accepted only when their md5 is the one dvc.lock records."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

from flows import dvc, regenerate
from flows import dvc_lookup as L
from flows.config import ROOT, load
from vxsynth.errors import VxError
from vxsynth.store.io import write_json


def _say(s: str) -> None:
    print(s, file=sys.stderr, flush=True)


def make_known(root: Path, say=_say) -> list[str]:
    """Make every revision's slice manifest available: fetch from the DVC remote, else regenerate from committed
    inputs where this checkout can. Returns why the others could not be."""
    missing = L.missing_manifests(root)
    if missing and dvc.is_workspace(root) and L.fetchable(root):
        say("fetching every revision's data from the DVC remote ...")
        dvc.dvc("fetch", "--all-commits", root=root, check=False)
        missing = L.missing_manifests(root)
    if not missing:
        return []
    from vxsynth.slicing.stage import run

    cfg = load([])
    why, done = [], set()
    for rev, lock in missing:
        want = L.stage_out(lock, "slice", "data/slices")
        if want in done or L.manifest(root, want) is not None:
            continue
        try:
            regenerate.slices(root, rev, lock, cfg["slicing"], cfg["precision"],
                              lambda d, o, c, p: run(d, o, c, p, log=lambda s: None), log=say)
            done.add(want)
        except VxError as e:
            why.append(f"{rev[:10]}: {e}")
    return why


def locate(prefix: str, root: Path = ROOT, say=_say) -> L.Found:
    """The slice with DVC hash `prefix`, with its record available locally (checked before any flow runs)."""
    prefix = L.check_prefix(prefix)
    try:
        return L.find_slice(root, prefix)[0]
    except VxError:
        why = make_known(root, say)
        try:
            return L.find_slice(root, prefix)[0]
        except VxError as e:
            raise VxError(f"{e}" + (f"; not available here: {'; '.join(why)}" if why else "")) from None


def compare(recorded: dict[str, Path], rerun_dir: Path, gpu: bool, source: str) -> dict:
    """What reproduced: the first round's strategy, sources and check verdicts; D when a GPU measured both. `source`
    says where the recorded reconstruction came from, or why there is none."""
    import pandas as pd

    if "trail.parquet" not in recorded:
        return {"match": None, "compared": source}
    old = pd.read_parquet(recorded["trail.parquet"]).iloc[0]
    new = pd.read_parquet(rerun_dir / "trail.parquet").iloc[0]
    checks = {"strategy": old["strategy_hash"] == new["strategy_hash"],
              "cuda source": old["cuda_sha256"] == new["cuda_sha256"],
              "vortex source": old["vortex_sha256"] == new["vortex_sha256"]}
    if gpu and old["check1"] not in ("", "not run (no GPU)"):
        checks["check 1 verdict"] = old["check1"] == new["check1"]
        checks["check 2 verdict"] = old["check2"] == new["check2"]
        if pd.notna(old["D"]) and pd.notna(new["D"]):
            checks["D within 0.02"] = abs(old["D"] - new["D"]) <= 0.02
    elif not new["check2"].endswith("pass"):
        checks["vortex vs reference"] = False
    return {"match": all(checks.values()),
            "compared": f"round 0 rerun here ({'with' if gpu else 'without'} GPU steps) against round 0 of {source}",
            "checks": checks, "differs": [k for k, ok in checks.items() if not ok],
            "recorded": {"check1": old["check1"], "check2": old["check2"], "D": None if pd.isna(old["D"]) else float(old["D"])},
            "rerun": {"check1": new["check1"], "check2": new["check2"], "D": None if pd.isna(new["D"]) else float(new["D"])}}


ARCHIVES = "bench/results/*/rebuild.tgz"     # committed rebuilds: their data/suite and the dvc.lock that records it


def _unpacked(r: Path, archive: Path) -> Path:
    """A committed rebuild archive's data/suite, unpacked once under scratch/."""
    into = L.regenerated_store(r) / "archives" / archive.parent.name
    if not (into / "done").exists():
        shutil.rmtree(into, ignore_errors=True)
        with tarfile.open(archive) as t:
            t.extractall(into, members=[m for m in t.getmembers() if m.name.startswith("data/suite/")], filter="data")
        (into / "done").touch()
    return into / "data" / "suite"


def _archived(r: Path, found: L.Found, want: str | None) -> tuple[dict[str, Path], str]:
    """The slice's reconstruction in a committed rebuild archive: the very data/suite `want` that revision's dvc.lock
    records (md5 verified), else one made from the same slice record by another revision (its stamp names the
    record's md5)."""
    for a in sorted(r.glob(ARCHIVES)):
        suite = _unpacked(r, a)
        d = suite / found.slice_id
        if not (d / "trail.parquet").exists():
            continue
        files = {p.relative_to(d).as_posix(): p for p in d.rglob("*") if p.is_file()}
        if want and L.path_md5(suite)[0] == want:
            return files, (f"the reconstruction that revision recorded ({a.relative_to(r)}: its data/suite has md5 "
                           f"{want[:10]}, the one dvc.lock records)")
        stamp = json.loads((d / ".stamp.json").read_text()) if (d / ".stamp.json").exists() else {}
        if found.md5 in ((stamp.get("parts") or {}).get("inputs") or {}).values():
            return files, f"the committed reconstruction of this slice record by another revision ({a.relative_to(r)})"
    return {}, ""


def _recorded(r: Path, found: L.Found) -> tuple[dict[str, Path], str]:
    """The recorded reconstruction of the slice to compare with and where it came from, or why there is none."""
    slices_out = L.stage_out(found.lock, "slice", "data/slices")
    used = [d["md5"] for d in L.stage_deps(found.lock, "reconstruct") if d["path"] == "data/slices"]
    want = L.stage_out(found.lock, "reconstruct", "data/suite") if used and used[0] == slices_out else None
    if want and (files := L.recorded_files(r, found.lock, "reconstruct", "data/suite", found.slice_id)):
        return files, f"the reconstruction that revision recorded (data/suite {want[:10]}, from the DVC cache or remote)"
    files, source = _archived(r, found, want)
    if files:
        return files, source
    if not used:
        return {}, "that revision recorded no reconstruction, and no committed rebuild holds this slice record"
    if not want:
        return {}, ("that revision's recorded reconstruction was made from other slice records (dvc.lock's reconstruct "
                    "stage is not up to date with its slice stage), and no committed rebuild holds this slice record")
    return {}, ("that revision's reconstruction outputs are in no DVC cache, remote or committed rebuild here"
                + ("; `dvc fetch --all-commits` gets them from the remote" if L.fetchable(r) else ""))


def run(prefix: str, overrides: list[str], root: str = str(ROOT), log=_say) -> dict:
    """Restore the slice, rerun its reconstruction in scratch/reproduce/<md5>, compare, write reproduce.json."""
    from vxsynth.reconstruct.setup import loop_env, run_slice
    from vxsynth.records import SliceRecord

    r = Path(root)
    found = locate(prefix, r, log)
    src = L.object_path(r, found.md5)
    if src is None:
        raise VxError(f"slice {found.slice_id} ({found.md5[:10]}) is known but its data is in neither cache nor remote")
    cfg = load(overrides)
    scratch = r / "scratch" / "reproduce" / found.md5[:12]
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "slices" / found.slice_id).mkdir(parents=True)
    shutil.copyfile(src, scratch / "slices" / found.slice_id / "slice.json")
    if L.path_md5(scratch / "slices" / found.slice_id / "slice.json")[0] != found.md5:
        raise VxError(f"the restored record of {found.slice_id} does not have md5 {found.md5}; the store is damaged")
    record = SliceRecord.load(scratch / "slices" / found.slice_id / "slice.json")
    source = "regenerated from committed profiles, md5 verified" if L.regenerated_store(r) in src.parents else "DVC cache/remote"
    log(f"{found.slice_id}: DVC md5 {found.md5} from {found.revision[:12]} ({source}); rerunning reconstruction in {scratch}")
    env, why = loop_env(cfg, cfg["platform"], scratch / "work")
    run_slice(cfg, record, scratch / "suite" / found.slice_id, scratch / "work", env, log=log)
    recorded, came = _recorded(r, found)
    verdict = {"slice_id": found.slice_id, "md5": found.md5, "revision": found.revision, "record_source": source,
               "scratch": str(scratch), "gpu_steps": "run" if why is None else f"skipped: {why}",
               **compare(recorded, scratch / "suite" / found.slice_id, why is None, came),
               "reconstruct code changed since": L.changed_deps(r, found.lock, "reconstruct")}
    write_json(scratch / "reproduce.json", verdict)
    head = {True: "match", False: f"differs in {', '.join(verdict.get('differs', []))}", None: "nothing to compare"}
    changed = verdict["reconstruct code changed since"]
    log(f"verdict: {head[verdict['match']]}: {verdict['compared']}"
        + (f"; the reconstruct stage's code and config changed since that revision: {', '.join(changed)}" if changed else "")
        + f" ({scratch / 'reproduce.json'})")
    return verdict


def reproduce_flow(prefix: str, overrides: list[str], root: str = str(ROOT)) -> dict:
    """`run` as one Prefect flow run (Prefect is imported only here: the lookups above run before orchestration)."""
    from prefect import flow, get_run_logger

    @flow(name="reproduce", log_prints=True)
    def reproduce(prefix: str, overrides: list[str], root: str) -> dict:
        return run(prefix, overrides, root, get_run_logger().info)

    return reproduce(prefix, overrides, root)
