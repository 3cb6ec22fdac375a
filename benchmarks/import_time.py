"""How much the torch_flydsl entry point adds to `import torch` (target: < 30 ms).

Three measurements, each in fresh interpreters:
1. the entry point itself: after `import torch` (autoload off), load and call the
   `torch.backends` entry point exactly as torch does, timed in-process (the precise figure);
2. wall time of `python -c "import torch"` with the plugin on, with TORCH_FLYDSL_DISABLE=1, and
   with every torch.backends entry point off (TORCH_DEVICE_BACKEND_AUTOLOAD=0), interleaved;
   on a shared 2-core machine its run-to-run noise is of the same order as the effect;
3. `-X importtime`: the self time of torch_flydsl's own modules inside `import torch`.

    python benchmarks/import_time.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from tabulate import tabulate

MODES = {
    "plugin on": {},
    "TORCH_FLYDSL_DISABLE=1": {"TORCH_FLYDSL_DISABLE": "1"},
    "no backend autoload": {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
}


def wall(env_extra: dict) -> float:
    env = {**os.environ, **env_extra}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=env)
    return time.perf_counter() - t0


ENTRY_POINT_PROBE = """
import time, importlib.metadata as md
import torch
ep = [e for e in md.entry_points(group="torch.backends") if e.name == "torch_flydsl"][0]
t = time.perf_counter()
ep.load()()
print((time.perf_counter() - t) * 1000)
"""


def entry_point_ms() -> float:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    r = subprocess.run([sys.executable, "-c", ENTRY_POINT_PROBE], capture_output=True, text=True, check=True, env=env)
    return float(r.stdout.strip().splitlines()[-1])


def plugin_import_ms() -> float:
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], capture_output=True, text=True, check=True)
    total = 0
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m and m.group(4).startswith("torch_flydsl"):
            total += int(m.group(1))  # self time in microseconds
    return total / 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    ep = [entry_point_ms() for _ in range(args.runs)]
    print(f"torch_flydsl entry point (load + call, in-process, {args.runs} runs): "
          f"median {statistics.median(ep):.1f} ms, max {max(ep):.1f} ms\n")
    samples = {k: [] for k in MODES}
    wall(MODES["plugin on"])  # warm the page cache
    for _ in range(args.runs):
        for name, env in MODES.items():
            samples[name].append(wall(env))
    base = statistics.median(samples["no backend autoload"])
    base_min = min(samples["no backend autoload"])
    rows = [(name, f"{statistics.median(s) * 1000:.0f}", f"{(statistics.median(s) - base) * 1000:+.0f}",
             f"{min(s) * 1000:.0f}", f"{(min(s) - base_min) * 1000:+.0f}") for name, s in samples.items()]
    print(tabulate(rows, headers=["import torch (wall)", "median ms", "vs no autoload", "min ms", "vs no autoload"]))
    own = [plugin_import_ms() for _ in range(5)]
    print(f"\ntorch_flydsl modules inside import torch (-X importtime, self time, median of 5): {statistics.median(own):.1f} ms")


if __name__ == "__main__":
    main()
