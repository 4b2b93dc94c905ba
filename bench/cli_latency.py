"""Wall time of `vxsynth` commands as a user types them: listing, slicing (fresh and up to date), and bad input
(each bad input 3 times: median and max, with the load average before).

usage: python bench/cli_latency.py DATA_DIR        (DATA_DIR: an empty scratch directory; its profiles/ is empty, so
`vxsynth slice` slices the committed H200 profiles into it). The project's Prefect server is started first if needed
and its start-up time is printed separately.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-m", "flows.cli"]


def timed(args: list[str]) -> tuple[float, int, str]:
    t = time.perf_counter()
    r = subprocess.run([*CLI, *args], capture_output=True, text=True)
    last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [""])[-1]
    return time.perf_counter() - t, r.returncode, last[:100]


def main() -> None:
    data = Path(sys.argv[1]).resolve()
    from flows import server

    t = time.perf_counter()
    was = server.running()
    server.ensure()
    print(f"{'prefect server ' + ('already running' if was else 'started'):<58} {time.perf_counter() - t:7.1f} s")
    runs = [("slice (fresh: data/profiles empty, the committed ones)", ["slice", f"data_dir={data}"]),
            ("slice (again: up to date)", ["slice", f"data_dir={data}"]),
            ("slices", ["slices", f"data_dir={data}"])]
    for name, args in runs:
        s, rc, last = timed(args)
        print(f"{name:<58} {s:7.1f} s  rc={rc}  {last}")
    bad = [("profile platform=nosuch", ["profile", "platform=nosuch"]),
           ("reproduce nothex", ["reproduce", "nothex"]),
           ("reconstruct loop.rounds=abc", ["reconstruct", f"data_dir={data}", "loop.rounds=abc"]),
           ("reconstruct --slice nosuch", ["reconstruct", "--slice", "nosuch", f"data_dir={data}"]),
           ("rebuild loop.rounds=abc", ["rebuild", f"data_dir={data}", "loop.rounds=abc"]),
           ("demo loop.rounds=abc", ["demo", f"data_dir={data}", "loop.rounds=abc"]),
           ("config data_dir=${nosuch}", ["config", "data_dir=${nosuch}"]),
           ("rebuild platform=orin (no Jetson here)", ["rebuild", f"data_dir={data}", "platform=orin"])]
    print(f"bad input, 3 runs each (load average {os.getloadavg()[0]:.1f}):      median    max")
    for name, args in bad:
        runs3 = [timed(args) for _ in range(3)]
        t = [r[0] for r in runs3]
        print(f"  {name:<56} {statistics.median(t):5.1f} s {max(t):5.1f} s  rc={runs3[-1][1]}  {runs3[-1][2]}")


if __name__ == "__main__":
    main()
