"""Orchestration overhead per Prefect task (CPU): a flow of N no-op tasks, run and submitted, against plain calls.

usage: python bench/orchestration.py [N]
"""

import os
import sys
import tempfile
import time

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="vxbench-prefect-"))

from prefect import flow, task  # noqa: E402


@task
def noop(i: int) -> int:
    return i


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100

    @flow
    def sequential():
        return [noop(i) for i in range(n)]

    @flow
    def submitted():
        return [f.result() for f in [noop.submit(i) for i in range(n)]]

    sequential()  # start the local API and warm up
    for name, f in (("called in sequence", sequential), ("submitted to the thread pool", submitted)):
        t = time.perf_counter()
        f()
        dt = time.perf_counter() - t
        print(f"{n} tasks {name}: {dt:.2f} s, {dt / n * 1e3:.1f} ms per task")
    t = time.perf_counter()
    [noop.fn(i) for i in range(n)]
    print(f"{n} plain calls: {(time.perf_counter() - t) * 1e6 / n:.2f} us per call")


if __name__ == "__main__":
    main()
