"""Compile every grouped GEMM config of a search space for gfx950 on this CPU and report its
compile time and resources, read from the compiled binary's kernel metadata.

    python benchmarks/grouped_gemm_compile_resources.py [--breadth curated] [--b-major col,row] [--dtype bf16]
                                                        [--tokens 4096] [--groups 128] [--n 3072]

One kernel per (config, dtype, expert-weight major) serves every shape, so each is compiled once.
Occupancy is an estimate from VGPRs and LDS (CDNA4: 512 unified VGPRs per lane, 160 KiB LDS per
CU, 8 waves per SIMD); the real figure needs the hardware. The last columns are for the
``--tokens`` x ``--n`` problem over ``--groups`` experts: the output tiles balanced routing
needs, the tile bound the launch plans for (``(ceil(T/block_m) + G) * ceil(N/block_n)``, any
routing), and the persistent grid (the bound, capped at the workgroups the GPU holds at once:
256 CUs x the LDS-resident count), with the tiles each workgroup takes under balanced routing.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tabulate import tabulate

from torch_flydsl.runtime.compile import compile_gfx950
from torch_flydsl.templates.grouped_gemm import compile_args, grid_block, search_space
from torch_flydsl.templates.gemm.persistent import tile_upper_bound


def operands(b_major, dtype, tokens, n, k, groups):
    """CPU stand-ins (never launched): A [T, K] row-major, B [G, K, N] of ``b_major``, offs, out."""
    a = torch.empty(tokens, k, dtype=dtype)
    b = torch.empty(groups, n, k, dtype=dtype).transpose(1, 2) if b_major == "col" else torch.empty(groups, k, n,
                                                                                                    dtype=dtype)
    return a, b, torch.zeros(groups, dtype=torch.int32), torch.empty(tokens, n, dtype=dtype)


def balanced_tiles(cfg, tokens: int, groups: int, n: int) -> int:
    """Output tiles balanced routing needs (each group's rows rounded up to block_m)."""
    per, extra = divmod(tokens, groups)
    rows = [per + (g < extra) for g in range(groups)]
    return sum(-(-r // cfg.block_m) for r in rows) * -(-n // cfg.block_n)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--b-major", default="col,row", help="comma-separated: col, row (each expert's [K, N])")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--tokens", type=int, default=4096, help="T (rows: tokens x top-k) for the WGs column")
    p.add_argument("--groups", type=int, default=128, help="G (experts) for the WGs column")
    p.add_argument("--n", type=int, default=3072, help="N for the WGs column")
    args = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    rows, seconds = [], []
    for cfg in search_space(args.breadth):
        for b_major in args.b_major.split(","):
            jit_fn, jit_args = compile_args(cfg, *operands(b_major, dtype, 512, 512, 4 * cfg.block_k, 8))
            ck = compile_gfx950(jit_fn, *jit_args)
            kr = ck.kernels[0]
            seconds.append(ck.seconds)
            tiles = balanced_tiles(cfg, args.tokens, args.groups, args.n)
            grid = grid_block(cfg, args.tokens, args.groups, args.n)[0][0]
            rows.append((cfg.key(), b_major, f"{ck.seconds:.2f}", kr.vgpr, kr.agpr, kr.sgpr, kr.lds_bytes,
                         kr.vgpr_spill + kr.sgpr_spill, kr.scratch_bytes, kr.waves_per_simd(cfg.threads), cfg.threads,
                         tiles, tile_upper_bound(args.tokens, args.groups, args.n, cfg.block_m, cfg.block_n), grid,
                         f"{tiles / grid:.1f}"))
    print(f"tile columns: T={args.tokens} rows over G={args.groups} experts, N={args.n}\n")
    print(tabulate(rows, headers=["config", "B major", "compile s", "VGPR", "AGPR", "SGPR", "LDS B", "spills",
                                  "scratch B", "waves/SIMD (est.)", "threads", "tiles (balanced)", "tile bound",
                                  "grid (WGs)", "tiles/WG"]))
    if seconds:
        print(f"\n{len(rows)} compiles, median {statistics.median(seconds):.2f} s, total {sum(seconds):.1f} s "
              f"(dtype {args.dtype})")


if __name__ == "__main__":
    main()
