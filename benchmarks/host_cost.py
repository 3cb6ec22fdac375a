"""Per-call host cost of the dense GEMM custom op before FlyDSL's dispatch, on this CPU.

    python benchmarks/host_cost.py [--iters 20000] [--json]

What a compiled graph pays on the host for every ``torch.ops.torch_flydsl.dense_mm_out`` /
``dense_addmm_out`` call before the kernel launch: PyTorch's op dispatch, the op body
(``ops.run``: parse the call, the executor check, the family's operand gate from its cache,
``config_fits``), and the launcher's argument packing (flat operand views, the kernel variant,
ints). It runs on CPU tensors, so four things are replaced, each named in the output:
``executor_for`` answers "device" (on a ROCm machine it reads one env var and three cached
probes), and the launcher's three GPU-only steps (``_on_gpu``, ``_current_stream``,
``dispatch``: FlyDSL's compiled-kernel call) do nothing. Those are what a native launcher
could not remove either (the stream query and FlyDSL's call are not ours).

Also times the pieces alone (gate cold vs cached, packing) to show where the time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from unittest import mock

import torch
from tabulate import tabulate

SHAPE = (16, 4096, 4096)  # the measurement point: decode-sized M


def per_call_us(fn, iters: int, repeats: int = 5) -> float:
    fn()
    return min(timeit.repeat(fn, number=iters, repeat=repeats)) / iters * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import torch_flydsl  # noqa: F401  (registers the ops)
    from torch_flydsl import ops
    from torch_flydsl.runtime import launch_guard
    from torch_flydsl.templates.dense_gemm import launcher
    from torch_flydsl.templates.dense_gemm.family import FAMILY as family

    m, n, k = SHAPE
    a = torch.randn(m, k).bfloat16()
    w = torch.randn(n, k).bfloat16()
    b = w.t()
    bias = torch.randn(n).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    cfg = "m16n64k128_w1x4_s3_g0"  # no split-K: a split's workspace comes from the caching allocator
    mm, addmm = ops.op("dense_mm_out"), ops.op("dense_addmm_out")
    dispatched = []

    patches = [
        mock.patch.object(launch_guard, "executor_for", lambda device: "device"),
        mock.patch.object(launcher, "_on_gpu", lambda t: True),
        mock.patch.object(launcher, "_current_stream", lambda device: 0),
        mock.patch.object(launcher, "dispatch", lambda jit_fn, args_, device: dispatched.append(1)),
    ]
    for p_ in patches:
        p_.start()
    try:
        call = family.parse_call("dense_mm_out", (a, b), {"cfg": cfg, "out": out})
        cfg_obj, problem = family.check_call(call)
        rows = [
            ("torch.ops dense_mm_out, whole host path", per_call_us(lambda: mm(a, b, cfg=cfg, out=out), args.iters)),
            ("torch.ops dense_addmm_out, whole host path",
             per_call_us(lambda: addmm(bias, a, b, alpha=1.0, beta=1.0, cfg=cfg, out=out), args.iters)),
            ("  ops.run body (no torch.ops dispatch)",
             per_call_us(lambda: ops.run(family, "dense_mm_out", (a, b), {"cfg": cfg, "out": out}), args.iters)),
            ("  operand gate, cached (check_call)", per_call_us(lambda: family.check_call(call), args.iters)),
            ("  operand gate, uncached (_check_call)", per_call_us(lambda: family._check_call(call), args.iters // 4)),
            ("  argument packing (compile_args)",
             per_call_us(lambda: launcher.compile_args(cfg_obj, a, b, out, None, 1.0, 1.0, 0, problem), args.iters)),
            ("  one flat operand view", per_call_us(lambda: launcher.flat_operand(a), args.iters)),
        ]
    finally:
        for p_ in patches:
            p_.stop()
    assert dispatched, "the patched dispatch was never reached: the op fell back to PyTorch"
    if args.json:
        print(json.dumps({name.strip(): round(us, 2) for name, us in rows}))
    else:
        print(f"dense GEMM custom op, {m}x{n}x{k} bf16 NT, config {cfg}, CPU tensors, "
              f"torch {torch.__version__}, Python {sys.version.split()[0]}")
        print(tabulate([(name, f"{us:.2f}") for name, us in rows], headers=["per call", "us (best of 5)"]))
        print("replaced (GPU-only): executor_for -> 'device', launcher._on_gpu, launcher._current_stream, "
              "launcher.dispatch (FlyDSL's call)")
        print(f"median of the whole-path rows: {statistics.median(r[1] for r in rows[:2]):.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
