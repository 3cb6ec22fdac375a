"""What the eager device benches' plumbing tests share (test_topk_bench, test_rmsnorm_bench):
a suite's ``measure`` run on CPU tensors in a fresh process, where the reference stand-in
executor serves the CPU (the executor is read when the overrides are registered, at import)
and a stand-in timer returns 2 ms for the callable that steps the plugin aside
(``torch_flydsl.disabled()``: PyTorch's kernel) and 1 ms for every other. Plumbing only: no
kernel runs and no time is measured."""

import json
import os
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent("""
    import argparse, json
    from torch_flydsl.bench import timing
    def standin_time_ms(fn, warmup, iters, flush=None):
        return 2.0 if "disabled" in fn.__code__.co_names else 1.0
    timing.time_ms = standin_time_ms
""")


def measure_on_cpu(suite: str, cases: str, **options) -> list:
    """The rows of ``torch_flydsl.bench.<suite>.measure(<cases>, args)`` (``cases`` a Python
    literal; ``args``: device cpu, one warmup and one iteration, plus ``options``)."""
    opts = {"device": "cpu", "warmup": 1, "iters": 1, **options}
    code = PRELUDE + textwrap.dedent(f"""
        from torch_flydsl.bench import {suite} as suite
        rows, _ = suite.measure({cases}, argparse.Namespace(**{opts!r}))
        print(json.dumps(rows))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TORCH_FLYDSL_EXECUTOR": "reference-standin"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
