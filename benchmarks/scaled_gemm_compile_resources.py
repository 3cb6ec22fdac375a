"""Compile every MX scaled GEMM config of a search space for gfx950 on this CPU and report its
compile time and resources, read from the compiled binary's kernel metadata.

    python benchmarks/scaled_gemm_compile_resources.py [--breadth curated] [--formats e4m3xe4m3,e4m3xe2m1]
                                                       [--out bf16] [--bias]

Occupancy is an estimate from VGPRs and LDS (CDNA4: 512 unified VGPRs per lane, 160 KiB LDS
per CU, 8 waves per SIMD); the real figure needs the hardware. "MFMA/tile" is the scaled MFMAs
each wave issues per K tile; "DMA/tile" the async loads each thread issues per K tile.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tabulate import tabulate

from torch_flydsl.runtime.compile import compile_gfx950
from torch_flydsl.templates.scaled_gemm import compile_args, grid_block, search_space
from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE


def operands(fa, fb, m, n, k, out_dtype, bias):
    a = torch.empty(m, fa.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[fa.name])
    b = torch.empty(n, fb.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[fb.name]).t()
    sa = torch.empty(m, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    sb = torch.empty(n, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    return a, b, sa, sb, torch.empty(m, n, dtype=out_dtype), torch.empty(n, dtype=out_dtype) if bias else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--formats", default="e4m3xe4m3,e2m1xe2m1,e4m3xe2m1", help="comma-separated AxB pairs")
    p.add_argument("--out", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--bias", action="store_true")
    p.add_argument("--m", type=int, default=32, help="M for the workgroup count column (decode: 32)")
    p.add_argument("--n", type=int, default=4096)
    args = p.parse_args()
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.out]
    pairs = [tuple(FORMATS[f] for f in pair.split("x")) for pair in args.formats.split(",")]
    rows, seconds = [], []
    for cfg in search_space(args.breadth):
        for fa, fb in pairs:
            if not cfg.fits_formats(fa, fb, out_dtype):
                continue
            jit_fn, jit_args = compile_args(cfg, *operands(fa, fb, 512, 512, 4 * cfg.block_k, out_dtype, args.bias))
            ck = compile_gfx950(jit_fn, *jit_args)
            kr = ck.kernels[0]
            seconds.append(ck.seconds)
            mfma = (cfg.block_m // cfg.m_waves // 16) * (cfg.block_n // cfg.n_waves // 16) * cfg.steps
            rows.append((cfg.key(), f"{fa.name}x{fb.name}", f"{ck.seconds:.2f}", kr.vgpr, kr.agpr, kr.sgpr,
                         kr.lds_bytes, kr.vgpr_spill + kr.sgpr_spill, kr.scratch_bytes, kr.waves_per_simd(cfg.threads),
                         mfma, cfg.tile_bytes(fa, fb).loads_per_tile, grid_block(cfg, args.m, args.n)[0][0]))
    print(tabulate(rows, headers=["config", "formats", "compile s", "VGPR", "AGPR", "SGPR", "LDS B", "spills",
                                  "scratch B", "waves/SIMD (est.)", "MFMA/tile", "DMA/tile",
                                  f"WGs at {args.m}x{args.n}"]))
    if seconds:
        print(f"\n{len(rows)} compiles, median {statistics.median(seconds):.2f} s, total {sum(seconds):.1f} s "
              f"(out {args.out}, bias {args.bias})")


if __name__ == "__main__":
    main()
