"""Child process of the CUDA executor: load the cubin with CuPy, launch on the job's inputs, save the output.

Usage: python -m vxsynth.targets.cuda_worker JOB.json   one job; prints one JSON line with timing on success
       python -m vxsynth.targets.cuda_worker --serve FD  persistent: one job per stdin line, one JSON reply line each
                                                         on file descriptor FD (not stdout: device printf goes there)
It sees only its inputs; reference outputs stay in the checking process. Every input sits between two guard zones of
NaN, so a read past an operand's end poisons the output. The output buffer is fresh per job, pre-filled with NaN
(zeros before each launch of a split-K kernel, which adds into it) and between two guard zones of canary words,
checked after the launches (exit status 5, or a `guard` reply, when the kernel wrote outside its buffer). The
measurement harness launches on buffers made by the same functions (`guarded_input`, `guarded_output`). A job with `workspace_words` passes a fifth argument, an fp32 workspace zeroed before every launch; one
with `flush_l2` overwrites a buffer larger than L2 before every launch (ncu's cache control, for timings); one
with `tensor_maps` passes them last, encoded on its operand buffers (`tensor_map`). In serve mode a CUDA error ends the process after its
reply (`fatal`): the context may be poisoned (sticky errors), so the parent starts a fresh worker.
"""

import json
import sys

import numpy as np

from vxsynth.targets import tensor_map

GUARD = 4096            # canary elements on each side of the output buffer
FLUSH_BYTES = 256 << 20     # written before a timed launch: over 4x the H200's 50 MB L2


class GuardError(Exception):
    pass


def kernel(cubin: str, name: str, smem_bytes: int):
    """The candidate's kernel, allowed the dynamic shared memory its launch asks for (above 48 KB needs opting in)."""
    import cupy as cp

    fn = cp.RawModule(path=cubin).get_function(name)
    if smem_bytes > 47 * 1024:      # opted in below 48 KB too: static mbarriers (tma) count against the same limit
        fn.max_dynamic_shared_size_bytes = smem_bytes
    return fn


def workspace(words: int):
    """The zeroed fp32 workspace of a 16-bit split-K launch (None when the kernel takes none)."""
    import cupy as cp

    return cp.zeros(int(words), dtype=cp.float32) if words else None


NAN_BITS = {"bfloat16": 0x7FC0, "float16": 0x7E00, "float32": 0x7FC00000}


def _words(dtype: str):
    import cupy as cp

    return cp.uint16 if dtype in ("bfloat16", "float16") else cp.uint32


def guarded_input(a, dtype: str):
    """A device copy of input `a` (its raw elements: 16-bit words or float32) between GUARD NaN elements on each side."""
    import cupy as cp

    a = cp.asarray(a)
    w = _words(dtype)
    buf = cp.full(a.size + 2 * GUARD, NAN_BITS[dtype], dtype=w)
    buf[GUARD:GUARD + a.size] = a.ravel().view(w)
    return buf[GUARD:GUARD + a.size].view(a.dtype)


def guarded_output(n: int, dtype: str):
    """(buffer, output view, canary): `n` NaN elements between GUARD canary words on each side."""
    import cupy as cp

    w = _words(dtype)
    canary = 0x5A3C if w is cp.uint16 else 0x7FA5C3E1
    buf = cp.full(n + 2 * GUARD, canary, dtype=w)
    buf[GUARD:GUARD + n] = NAN_BITS[dtype]
    return buf, buf[GUARD:GUARD + n].view(cp.uint16 if w is cp.uint16 else cp.float32), canary


def guard_error(buf, n: int, canary) -> str | None:
    """Why the output's guard zones changed (the kernel wrote outside its output), or None."""
    import cupy as cp

    guards = cp.asnumpy(cp.concatenate([buf[:GUARD], buf[GUARD + n:]]))
    if (guards != canary).any():
        return f"guard zone: the kernel wrote {'before' if (guards[:GUARD] != canary).any() else 'past'} its output buffer"
    return None


def run_job(job: dict) -> list[float]:
    """Launch the job's kernel `repeat` times on fresh buffers, save its output; the kernel times in us."""
    arrays = {r: np.load(p) for r, p in job["inputs"].items()}
    import cupy as cp

    raw = np.uint16 if job["dtype"] in ("bfloat16", "float16") else np.float32
    bufs = {r: guarded_input(a, job["dtype"]) for r, a in arrays.items()}
    n = job["out_elements"]
    buf, out, canary = guarded_output(n, job["dtype"])
    smem = int(job.get("smem_bytes", 0))
    fn = kernel(job["cubin"], job["kernel"], smem)
    null = cp.zeros(1, dtype=raw)
    ws = workspace(job.get("workspace_words", 0))
    args = (bufs["a"], bufs["b"], bufs.get("bias", null), out) + ((ws,) if ws is not None else ()) + tensor_map.kernel_args(
        job.get("tensor_maps", []), job["dtype"], {r: (bufs[r].data.ptr, bufs[r].nbytes) for r in ("a", "b")})
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    flush = cp.empty(FLUSH_BYTES, dtype=cp.uint8) if job.get("flush_l2") else None
    for _ in range(job.get("repeat", 1)):
        if flush is not None:
            flush.fill(1)
        if job.get("zero_output"):     # split-K kernels add into a zeroed output (the reference's scal kernel)
            buf[GUARD:GUARD + n] = 0
        if ws is not None:
            ws.fill(0)
        start.record()
        fn(tuple(job["grid"]), tuple(job["block"]), args, shared_mem=smem)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1000.0)
    cp.cuda.runtime.deviceSynchronize()
    if why := guard_error(buf, n, canary):
        raise GuardError(why)
    np.save(job["output"], cp.asnumpy(out))
    return times


def serve(fd: int) -> int:
    """Say ready once the CUDA context is made (or why not), then answer jobs from stdin on `fd` until stdin closes;
    exit after a CUDA error (the context may be unusable)."""
    with open(fd, "w") as replies:
        try:
            import cupy as cp

            cp.zeros(1).sum().get()
            replies.write(json.dumps({"ready": True}) + "\n")
        except Exception as e:  # noqa: BLE001 - no GPU here: every job will fail and say why
            replies.write(json.dumps({"ready": False, "error": f"{type(e).__name__}: {e}"[:300]}) + "\n")
        replies.flush()
        for line in sys.stdin:
            try:
                reply = {"ok": True, "kernel_us": run_job(json.loads(line))}
            except GuardError as e:
                reply = {"ok": False, "error": str(e), "failure": "guard_zone"}
            except Exception as e:  # noqa: BLE001 - any CUDA or loading error ends this worker after its reply
                replies.write(json.dumps({"ok": False, "fatal": True, "failure": "crash",
                                          "error": f"{type(e).__name__}: {e}"[:600]}) + "\n")
                return 3
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    return 0


GUARD_EXIT = 5                       # a one-job run's exit status when the kernel wrote outside its output
EXIT_FAILURES = {GUARD_EXIT: "guard_zone"}     # exit status -> failure kind (`proc.FAILURES`), read by `cuda.run_cuda`


def main() -> int:
    if sys.argv[1] == "--serve":
        return serve(int(sys.argv[2]))
    try:
        times = run_job(json.loads(open(sys.argv[1]).read()))
    except GuardError as e:
        print(e, file=sys.stderr)
        return GUARD_EXIT
    print(json.dumps({"kernel_us": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
