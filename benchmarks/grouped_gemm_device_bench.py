"""Time the grouped GEMM family on an MI350 (gfx950): every curated FlyDSL config that fits,
against PyTorch's ``torch._grouped_mm`` and (where Inductor offers it) Inductor's Triton grouped
template, on MoE expert projections with balanced and skewed routing.

    python benchmarks/grouped_gemm_device_bench.py [--models mixtral,qwen3] [--routings balanced,zipf,empty]
        [--tokens 512,16384] [--b-major col,row] [--dtype bf16|fp16] [--via launcher|launch|op] [--no-triton]
        [--warmup 10] [--iters 50] [--flush-l2] [--no-check] [--out grouped_gemm_bench]
    python benchmarks/grouped_gemm_device_bench.py --dry-run     # the cases and their configs; any machine

The script entry point of ``torch_flydsl.bench.grouped_mm`` (the cases, the timing and the
outputs are described there); ``python -m torch_flydsl bench grouped_mm`` runs the same suite
from an installed package. Without a ROCm gfx950 GPU it says so in one line and exits 0.
"""

import sys

from torch_flydsl.bench.grouped_mm import main

if __name__ == "__main__":
    sys.exit(main())
