"""Time the dense GEMM family on an MI350 (gfx950): every curated FlyDSL config that fits,
against ATen (``torch.mm``) and Inductor's Triton GEMM, on 15 BF16 NT LLM shapes.

    python benchmarks/dense_gemm_device_bench.py [--shapes 1,4,15] [--via launcher|op]
        [--timing graph|events] [--no-triton] [--warmup 10] [--iters 50] [--flush-l2] [--no-check]
        [--breadth curated] [--out dense_gemm_bench]
    python benchmarks/dense_gemm_device_bench.py --dry-run     # the plan; any machine

The script entry point of ``torch_flydsl.bench.mm`` (the suite, its timing and its outputs are
described there); ``python -m torch_flydsl bench mm`` runs the same suite from an installed
package. Without a ROCm gfx950 GPU it says so, prints the plan and exits 0.
"""

import sys

from torch_flydsl.bench.mm import main

if __name__ == "__main__":
    sys.exit(main())
