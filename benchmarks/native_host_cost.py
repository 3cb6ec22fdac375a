"""Per-call host cost of a cached GEMM on the native launcher against today's Python path, on this CPU.

    python benchmarks/native_host_cost.py [--iters 20000] [--json]

Native path (csrc/, built against this torch): the op's C++ body for a kernel whose code object
is loaded: the family gate, the unit lookup, packing the kernarg buffer at the offsets the code
object's metadata gives, and the ``hipModuleLaunchKernel`` call. HIP here is a stand-in library
(test/native/standin_hip_for_plumbing.c, plumbing only): its launch records the call and copies
the kernarg buffer, so the native rows include one call into it. Three ways in, each a row:

* ``plan + pack + launch``: the C++ body called directly, timed in C++ (what the CUDA-key kernel
  runs after the stream lookup);
* ``through the dispatcher from C++``: the ``_on_stream`` op called boxed from C++, as a C++
  caller (AOTInductor's proxy executor, a C++ runner) reaches it;
* ``torch.ops from Python``: the same op from Python (adds pybind and argument conversion).

Python path: ``benchmarks/host_cost.py``'s rows (run here, same shape and config): the whole
custom-op host path up to FlyDSL's compiled call, which cannot run without a GPU and is not
counted there. So the comparison leaves out the Python path's own packing (FlyDSL's ctypes host
slots) and launch: the native rows carry theirs, the Python rows do not.

Shapes: the dense decode point of host_cost.py (16x4096x4096 bf16 NT, m16n64k128_w1x4_s3_g0),
MXFP8 16x4096x4096 and grouped MoE (1024 tokens, 8 experts, N=4096, K=2048, K-contiguous
experts). The code objects are compiled compile-only for gfx950 here (a few seconds each).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

import torch
from tabulate import tabulate

HERE = Path(__file__).resolve().parent
STANDIN = HERE.parent / "test" / "native" / "standin_hip_for_plumbing.c"
STREAM = 0x1000


def per_call_us(fn, iters: int, repeats: int = 5) -> float:
    fn()
    return min(timeit.repeat(fn, number=iters, repeat=repeats)) / iters * 1e6


def _cases():
    """(label, custom op, operands in schema order with out last, alpha, beta, cfg key, has_bias)."""
    from torch_flydsl.templates.scaled_gemm.problem import SCALE_DTYPE

    m, n, k = 16, 4096, 4096
    a, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    bias, out = torch.randn(n).bfloat16(), torch.empty(m, n, dtype=torch.bfloat16)
    dense = "m16n64k128_w1x4_s3_g0"
    fa = torch.empty(m, k, dtype=torch.uint8).view(torch.float8_e4m3fn)
    fb = torch.empty(n, k, dtype=torch.uint8).view(torch.float8_e4m3fn).t()
    sa = torch.empty(128, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    sb = torch.empty(n, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    tokens, groups, gn, gk = 1024, 8, 4096, 2048
    ga = torch.randn(tokens, gk).bfloat16()
    gb = torch.randn(groups, gn, gk).bfloat16().transpose(1, 2)
    offs = torch.tensor([128 * (g + 1) for g in range(groups)], dtype=torch.int32)
    gout = torch.empty(tokens, gn, dtype=torch.bfloat16)
    return [
        (f"dense mm {m}x{n}x{k} bf16 NT", "dense_mm_out", [a, w.t(), out], 1.0, 0.0, dense),
        (f"dense addmm {m}x{n}x{k} bf16 NT", "dense_addmm_out", [bias, a, w.t(), out], 1.0, 1.0, dense),
        (f"MXFP8 scaled_mm {m}x{n}x{k}", "scaled_mm_out", [fa, fb, sa, sb, None, out], 1.0, 1.0, None),
        (f"grouped_mm {tokens} tokens x {groups} experts, N={gn} K={gk}", "grouped_mm_out", [ga, gb, offs, gout],
         1.0, 1.0, None),
    ]


def _family_args(op: str, operands: list, alpha: float, beta: float, cfg: str):
    if op == "dense_mm_out":
        return (operands[0], operands[1]), {"cfg": cfg, "out": operands[2]}
    if op == "dense_addmm_out":
        return tuple(operands[:3]), {"alpha": alpha, "beta": beta, "cfg": cfg, "out": operands[3]}
    return tuple(operands[:-1]), {"cfg": cfg, "out": operands[-1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="native_host_cost_"))
    standin = work / "libstandin_hip_for_plumbing.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(standin), str(STANDIN)], check=True)
    os.environ["TORCH_FLYDSL_HIP_LIBRARY"] = str(standin)

    import torch_flydsl  # noqa: F401  (registers the ops)
    from torch_flydsl.native import build, export
    from torch_flydsl.registry import require_family

    build.build()
    native = torch.ops.torch_flydsl_native
    rows, units = [], []
    cases = _cases()
    for label, op, operands, alpha, beta, cfg in cases:
        family = require_family({"dense_mm_out": "mm", "dense_addmm_out": "mm", "scaled_mm_out": "scaled_mm",
                                 "grouped_mm_out": "grouped_mm"}[op])
        if cfg is None:  # the family's baseline pick for the shape
            cfg = family.curated()[0].key()
        pos, kw = _family_args(op, operands, alpha, beta, cfg)
        checked = family.check_call(family.parse_call(op, pos, kw))
        assert isinstance(checked, tuple), f"{label}: {checked}"
        units.append(export.unit_for(family, *checked, None if op != "dense_addmm_out" or beta else False))
        export.write(work, units[-1:])
        native.use_cache_dir(str(work))
        runs = [native.host_cost(op, operands, alpha, beta, cfg, STREAM, args.iters) for _ in range(5)]
        direct_ns, dispatched_ns = min(r[0] for r in runs), min(r[1] for r in runs)  # best of 5, as per_call_us
        python_us = per_call_us(lambda: getattr(native, op + "_on_stream")(*pos, **kw, stream=STREAM), args.iters)
        rows.append((label, cfg, direct_ns / 1e3, dispatched_ns / 1e3, python_us))

    buf = io.StringIO()
    sys.path.insert(0, str(HERE))
    import host_cost

    with contextlib.redirect_stdout(buf):
        host_cost.main(["--json", "--iters", str(args.iters)])
    python_path = json.loads(buf.getvalue())

    if args.json:
        print(json.dumps({"native": [dict(zip(("case", "cfg", "plan_pack_launch_us", "dispatcher_from_cpp_us",
                                                "torch_ops_from_python_us"), r)) for r in rows],
                          "python_path": python_path}))
        return 0
    print(f"native launcher host cost per call, CPU tensors, stand-in HIP (records only), torch {torch.__version__}, "
          f"Python {sys.version.split()[0]}, {args.iters} calls x best of 5")
    print(tabulate([(r[0], r[1], f"{r[2]:.2f}", f"{r[3]:.2f}", f"{r[4]:.2f}") for r in rows],
                   headers=["case", "config", "plan+pack+launch us", "dispatcher from C++ us",
                            "torch.ops from Python us"]))
    print()
    print("today's Python path (benchmarks/host_cost.py, same dense shape and config; FlyDSL's call not counted):")
    print(tabulate([(k, f"{v:.2f}") for k, v in python_path.items()], headers=["per call", "us"]))
    worst = max(r[2] for r in rows)
    print(f"\nnative argument packing and launch preparation, worst case: {worst:.2f} us (target < 5 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
