"""Time the grouped GEMM family on an MI350 (gfx950): every curated FlyDSL config that fits,
against PyTorch's ``torch._grouped_mm`` and (where Inductor offers it) Inductor's Triton grouped
template, on MoE expert projections with balanced and skewed routing.

    python benchmarks/grouped_gemm_device_bench.py [--models mixtral,qwen3,moe8x2048] [--routings balanced,zipf,empty]
        [--tokens 512,16384] [--b-major col,row] [--dtype bf16|fp16] [--via launcher|launch|op] [--no-triton]
        [--warmup 10] [--iters 50] [--flush-l2] [--no-check] [--out grouped_gemm_bench]
    python benchmarks/grouped_gemm_device_bench.py --dry-run     # the cases and their configs; any machine

The script entry point of ``torch_flydsl.bench.grouped_mm`` (the cases, the timing and the
outputs are described there: a table, CSVs and a plot); ``python -m torch_flydsl bench
grouped_mm`` runs the same suite from an installed package. The suite holds the static
side-by-side report's MoE forward (``benchmarks/isa_shapes``: 8 balanced experts, N=4096, K=2048,
1024 and 8192 tokens) as the model ``moe8x2048`` (gate_up: N = 2 x 2048, K = 2048; top-1) and
1024 among the token counts, so an MI350 run times every grouped shape ``benchmarks/isa_compare.py``
models (``--models moe8x2048 --tokens 1024,8192 --routings balanced --b-major row,col`` for just
those; ``row`` is the layout torch 2.15's in-tree kernel serves). Without a ROCm gfx950 GPU it
says so in one line and exits 0.
"""

import sys

from torch_flydsl.bench import grouped_mm

if __name__ == "__main__":
    sys.exit(grouped_mm.main())
