"""How much the torch_flydsl entry point adds to `import torch` (target: < 30 ms).

Two measurements, each in fresh interpreters, interleaved to share machine noise:
1. wall time of `python -c "import torch"` with the plugin on, with TORCH_FLYDSL_DISABLE=1, and
   with every torch.backends entry point off (TORCH_DEVICE_BACKEND_AUTOLOAD=0);
2. `-X importtime`: the cumulative import time of torch_flydsl's own modules inside `import torch`.

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
    samples = {k: [] for k in MODES}
    wall(MODES["plugin on"])  # warm the page cache
    for _ in range(args.runs):
        for name, env in MODES.items():
            samples[name].append(wall(env))
    base = statistics.median(samples["no backend autoload"])
    rows = [(name, f"{statistics.median(s) * 1000:.0f}", f"{(statistics.median(s) - base) * 1000:+.0f}") for name, s in samples.items()]
    print(tabulate(rows, headers=["import torch", "median ms", "vs no autoload"]))
    own = [plugin_import_ms() for _ in range(5)]
    print(f"\ntorch_flydsl modules inside import torch (-X importtime, self time, median of 5): {statistics.median(own):.1f} ms")


if __name__ == "__main__":
    main()
