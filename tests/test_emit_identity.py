"""The emitter's output is pinned: every case of tests/fixtures/emit_identity.json (problem, strategy) emits CUDA and
Vortex sources, and launch facts, with the sha256 recorded there. Refactors of `vxsynth/kernels` keep them
byte-identical; a deliberate change of the emitted code re-records the fixture and says why in its commit.

Cases: every strategy of tests/kernel_matrix.py on its problems (and the Vortex strategy its default core lowers it
to), the three bases of tests/attacks.yaml, the informed start of every suite slice (sliced from the committed H200
profiles), and seeded random repaired points of the optimizer's space over all those problems.
Record (only for a deliberate change): python tests/test_emit_identity.py
"""

from __future__ import annotations

import json
from pathlib import Path

from vxsynth.kernels.dialects import CUDA, VORTEX
from vxsynth.kernels.emit import emit
from vxsynth.kernels.geometry import geometry, kernel_name, vortex_out_elements, workspace_words
from vxsynth.kernels.problem import from_dict, to_dict
from vxsynth.kernels.strategy import Strategy
from vxsynth.records import SliceRecord
from vxsynth.store.io import sha256_obj, sha256_text

FIXTURE = Path(__file__).parent / "fixtures" / "emit_identity.json"
RANDOM_POINTS = 400


def hashes(problem, strategy) -> dict:
    """sha256 of each dialect's source (or of the refusal) and of the launch facts the emitter exports."""
    out = {}
    for d in (CUDA, VORTEX):
        try:
            out[d.name] = sha256_text(emit(problem, strategy, d))
        except ValueError as e:
            out[d.name] = "refused: " + sha256_text(str(e))
    if "refused" not in out["cuda"]:
        g = geometry(problem, strategy)
        out["facts"] = sha256_obj([list(g.__dict__.values()), kernel_name(problem, strategy),
                                   workspace_words(problem, strategy), vortex_out_elements(problem, strategy)])
    return out


def test_emitted_sources_are_unchanged():
    cases = json.loads(FIXTURE.read_text())["cases"]
    assert len(cases) > 600
    changed = [(c["from"], c["strategy"], k) for c in cases
               for k, v in hashes(from_dict(c["problem"]), Strategy.from_dict(c["strategy"])).items() if c[k] != v]
    assert not changed, f"{len(changed)} changed, first: {changed[:3]}"


def _cases():
    """(origin, problem, strategy) of every case, built from the sources named in the module docstring."""
    import random

    import yaml

    from tests.conftest import conf, recorded_profiles
    from tests.kernel_matrix import PROBLEMS, STRATEGIES
    from vxsynth.checks.run import CheckEnv
    from vxsynth.kernels.candidate import vortex_lowering
    from vxsynth.kernels.strategy import check, repair
    from vxsynth.reconstruct.loop import LoopEnv, validator
    from vxsynth.reconstruct.start import informed
    from vxsynth.slicing.stage import run as slice_run
    from vxsynth.targets.vortex_host import HostExecutor, VortexConfig, lmem_per_block

    problems = []
    for name, (p, _) in PROBLEMS.items():
        problems.append(p)
        for i, s in enumerate(STRATEGIES):
            yield f"matrix:{name}:s{i}", p, s
            if check(p, s) is None:
                v, _ = vortex_lowering(p, s, lmem_per_block(s.threads, VortexConfig()))
                if v != s:
                    yield f"matrix:{name}:s{i}:vortex", p, v
    attacks = yaml.safe_load((Path(__file__).parent / "attacks.yaml").read_text())
    for name, base in attacks["bases"].items():
        p = from_dict(base["problem"])
        problems.append(p)
        yield f"attack:{name}", p, Strategy.from_dict(base["strategy"])
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        slice_run(recorded_profiles(), Path(tmp) / "slices", conf("slicing"), conf("precision"), log=lambda s: None)
        env = LoopEnv(CheckEnv(HostExecutor(VortexConfig(max_blocks=6)), conf("precision")), [])
        for path in sorted((Path(tmp) / "slices").glob("*/slice.json")):
            rec = SliceRecord.load(path)
            p = rec.problem
            problems.append(p)
            yield f"start:{rec.slice_id}", p, informed(rec, conf("start", "informed"), validator(p, rec.precision, env))[0]
    space, rng = conf("agent", "optuna")["space"], random.Random(40)
    for i in range(RANDOM_POINTS):
        p = rng.choice(problems)
        s = repair(p, Strategy(warps_m=rng.choice([0, 2])).with_(**{k: rng.choice(v) for k, v in space.items()}))
        while check(p, s) is not None:
            s = repair(p, Strategy(warps_m=rng.choice([0, 2])).with_(**{k: rng.choice(v) for k, v in space.items()}))
        yield f"random:{i}", p, s


def record() -> None:
    cases = [{"from": o, "problem": to_dict(p), "strategy": s.to_dict(), **hashes(p, s)} for o, p, s in _cases()]
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text('{"cases": [\n' + ",\n".join(json.dumps(c, sort_keys=True) for c in cases) + "\n]}\n")
    print(f"{len(cases)} cases, {sum(('refused' not in c['cuda']) + ('refused' not in c['vortex']) for c in cases)} "
          f"sources -> {FIXTURE}")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    record()
