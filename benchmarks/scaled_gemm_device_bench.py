"""Time the MX scaled GEMM family on an MI350 (gfx950): FlyDSL's best curated config against
PyTorch's ``torch._scaled_mm`` (and torch 2.15's in-tree FlyDSL kernel where that torch runs)
on the same operands, per shape and MX format.

    python benchmarks/scaled_gemm_device_bench.py [--formats mxfp8,mxfp4] [--out scaled_gemm_bench]
        [--via launcher|op] [--aten v1|v2] [--warmup 10] [--iters 50] [--flush-l2] [--no-check]
    python benchmarks/scaled_gemm_device_bench.py --dry-run     # the suite and its configs; any machine

The script entry point of ``torch_flydsl.bench.scaled_mm`` (the suite, its timing and its
outputs are described there: a table, CSVs and a plot); ``python -m torch_flydsl bench
scaled_mm`` runs the same suite from an installed package. The suite holds every shape of the
static side-by-side report (``benchmarks/isa_shapes.MX_SHAPES``: issue 20's eight), so an MI350
run times every shape ``benchmarks/isa_compare.py`` models (``test/test_isa_compare.py`` checks
that). Without a ROCm gfx950 GPU it says so and exits 0.
"""

import sys

from torch_flydsl.bench import scaled_mm

if __name__ == "__main__":
    sys.exit(scaled_mm.main())
