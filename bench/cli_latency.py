"""Wall time of `vxsynth` commands as a user types them: listing, slicing (fresh and up to date), and bad input.

usage: python bench/cli_latency.py DATA_DIR        (DATA_DIR: an empty scratch directory; the committed H200
profiles are sliced into it). Run it on an idle machine; the project's Prefect server is started first if needed
and its start-up time is printed separately.
"""

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
    runs = [("slice (fresh: slices the committed H200 profiles)", ["slice", "slicing.profiles=[data/recorded/h200]", f"data_dir={data}"]),
            ("slice (again: up to date)", ["slice", "slicing.profiles=[data/recorded/h200]", f"data_dir={data}"]),
            ("slices", ["slices", f"data_dir={data}"]),
            ("bad input: profile platform=nosuch", ["profile", "platform=nosuch"]),
            ("bad input: reproduce nothex", ["reproduce", "nothex"]),
            ("bad input: reconstruct loop.rounds=abc", ["reconstruct", f"data_dir={data}", "loop.rounds=abc"]),
            ("bad input: config data_dir=${nosuch}", ["config", "data_dir=${nosuch}"])]
    for name, args in runs:
        s, rc, last = timed(args)
        print(f"{name:<58} {s:7.1f} s  rc={rc}  {last}")


if __name__ == "__main__":
    main()
