"""Host cost of the eager overrides per call, on this machine's CPU (no GPU needed).

Times, per overridden op of every family with eager overrides in the registry (e.g. RMSNorm's
``_fused_rms_norm``): the family's gate (``eager_call``) on a declined call and on an eligible
one (outputs allocated, kernel not run), and the whole decline path through the router
(``eager._take``: gate + the debug-log check), against the same call inside
``torch_flydsl.disabled()``. Target: under 5 us per call for the gate. Repeated calls hit the
family's per-metadata decision cache, as a model's layers do.

    python benchmarks/eager_overhead.py [--iters 20000]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TORCH_FLYDSL_EXECUTOR", "reference-standin")  # lets the CPU stand for the GPU

import torch  # noqa: E402


def per_call_us(fn, iters: int) -> float:
    for _ in range(min(iters, 1000)):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6


def rmsnorm_cases():
    x = torch.randn(8, 4097, dtype=torch.bfloat16)
    w = torch.randn(4097, dtype=torch.bfloat16)
    return {
        "eligible bf16 [8, 4097] + weight": (x, [4097], w, 1e-6),
        "declined float64 input": (x.double(), [4097], None, 1e-6),
        "declined non-contiguous input": (torch.randn(4097, 8, dtype=torch.bfloat16).t(), [4097], None, None),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args(argv)

    import torch_flydsl
    from torch_flydsl import eager
    from torch_flydsl.registry import families
    from torch_flydsl.templates.base import Decline

    fam = next(f for f in families() if f.name == "rmsnorm")
    override = fam.eager_overrides[0]
    impl = fam
    rows = []
    for name, call in rmsnorm_cases().items():
        gate = per_call_us(lambda: impl.eager_call(override.target, call, {}), args.iters)
        taken = impl.eager_call(override.target, call, {})
        declined = isinstance(taken, Decline)
        path = per_call_us(lambda: eager._take(fam, override, call, {}), args.iters) if declined else None
        op = torch.ops.aten._fused_rms_norm.default

        def pytorch():
            with torch_flydsl.disabled():
                op(*call)

        rows.append((name, "declined: " + taken.reason[:48] if declined else "taken", gate, path,
                     per_call_us(pytorch, max(args.iters // 10, 100))))
    print(f"torch {torch.__version__}, executor {os.environ['TORCH_FLYDSL_EXECUTOR']}, best of 5 x {args.iters} calls")
    print(f"{'call':38} {'gate':>9} {'decline path':>13} {'PyTorch op (CPU)':>17}  outcome")
    for name, outcome, gate, path, pt in rows:
        p = f"{path:10.2f} us" if path is not None else " " * 13
        print(f"{name:38} {gate:6.2f} us {p} {pt:14.1f} us  {outcome}")
    worst = max(r[2] for r in rows if r[1] != "taken")
    print(f"worst declined gate: {worst:.2f} us per call (target < 5 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
