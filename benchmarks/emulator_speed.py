"""Emulation speed: one 256x256 output tile of a bf16 GEMM with K=512 (one workgroup, 8 waves).

    .venv/bin/python benchmarks/emulator_speed.py [--repeat 3] [--no-check]

Reports the compile+capture time (FlyDSL, once per kernel), the first emulation (includes
translating the IR into closures, cached afterwards) and the steady-state emulation time of
the launch, with and without the race/OOB checker. Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    args = ap.parse_args()

    import torch

    from torch_flydsl.emulator import emulate
    from torch_flydsl.emulator.capture import capture
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.launcher import compile_args
    from torch_flydsl.templates.dense_gemm.reference import reference

    cfg = DenseGemmConfig(256, 256, 64, 2, 4, 2, 8)
    torch.manual_seed(0)
    a = torch.randn(args.m, args.k).bfloat16()
    b = torch.randn(args.k, args.n).bfloat16()
    out = torch.zeros(args.m, args.n, dtype=torch.bfloat16)
    jit_fn, jargs = compile_args(cfg, a, b, out)

    t0 = time.perf_counter()
    capture(jit_fn, *jargs)
    t_capture = time.perf_counter() - t0

    rows = []
    for check in (True, False):
        times = []
        for i in range(args.repeat):
            out.zero_()
            rep = emulate(jit_fn, jargs, check=check)
            times.append(rep.launches[0].seconds)
        rows.append((check, times, rep))
    err = ((out.double() - reference(a, b)).abs().max() / reference(a, b).abs().max()).item()

    print(f"kernel {rows[0][2].launches[0].kernel}: grid {rows[0][2].launches[0].grid} block {rows[0][2].launches[0].block}")
    print(f"problem M={args.m} N={args.n} K={args.k} bf16, config {cfg.key()}")
    print(f"compile + capture (FlyDSL, once per kernel): {t_capture:.2f} s")
    for check, times, rep in rows:
        print(
            f"emulation, checker {'on ' if check else 'off'}: first {times[0]:.2f} s, "
            f"best {min(times):.2f} s over {len(times)} runs ({len(rep.findings)} findings)"
        )
    print(f"max rel err vs float64 reference: {err:.2e}")


if __name__ == "__main__":
    main()
