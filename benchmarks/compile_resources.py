"""Compile every dense GEMM config of a search space for gfx950 on this CPU and report its
compile time and resources, read from the compiled binary's kernel metadata.

    python benchmarks/compile_resources.py [--breadth curated] [--layouts nt] [--dtype bf16] [--bias]

Occupancy is an estimate from VGPRs and LDS (CDNA4: 512 unified VGPRs per lane, 160 KiB LDS
per CU, 8 waves per SIMD); the real figure needs the hardware.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tabulate import tabulate

from torch_flydsl.runtime.compile import compile_gfx950
from torch_flydsl.templates.dense_gemm.config import search_space
from torch_flydsl.templates.dense_gemm.launcher import compile_args


def operand(rows, cols, major, dtype):
    return torch.empty(rows, cols, dtype=dtype) if major == "n" else torch.empty(cols, rows, dtype=dtype).t()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--layouts", default="nt", help="comma-separated: nn,nt,tn,tt")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--bias", action="store_true")
    args = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    rows, seconds = [], []
    for cfg in search_space(args.breadth):
        for layout in args.layouts.split(","):
            m, n, k = 512, 512, 4 * cfg.block_k
            a, b = operand(m, k, layout[0], dtype), operand(k, n, layout[1], dtype)
            out = torch.empty(m, n, dtype=dtype)
            bias = torch.empty(n, dtype=dtype) if args.bias else None
            jit_fn, jit_args = compile_args(cfg, a, b, out, bias)
            ck = compile_gfx950(jit_fn, *jit_args)
            kr = ck.kernels[0]
            seconds.append(ck.seconds)
            rows.append((cfg.key(), layout, f"{ck.seconds:.2f}", kr.vgpr, kr.agpr, kr.sgpr, kr.lds_bytes,
                         kr.vgpr_spill + kr.sgpr_spill, kr.scratch_bytes, kr.waves_per_simd(cfg.threads)))
    print(tabulate(rows, headers=["config", "layout", "compile s", "VGPR", "AGPR", "SGPR", "LDS B", "spills",
                                  "scratch B", "waves/SIMD (est.)"]))
    print(f"\n{len(rows)} compiles, median {statistics.median(seconds):.2f} s, total {sum(seconds):.1f} s "
          f"(dtype {args.dtype}, bias {args.bias})")


if __name__ == "__main__":
    main()
