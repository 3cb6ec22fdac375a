"""Eager RMSNorm on an MI350 (gfx950): FlyDSL vs PyTorch's own kernel, seed-like sweep.

    python benchmarks/rmsnorm_device_bench.py [--dry-run] [--out DIR] [--flush] [--iters N]

The script entry point of ``torch_flydsl.bench.rms_norm`` (the sweep and its outputs are
described there); ``python -m torch_flydsl bench rms_norm`` runs the same suite from an
installed package. Without a ROCm gfx950 GPU it prints its plan and exits 0.
"""

import sys

from torch_flydsl.bench.rms_norm import main

if __name__ == "__main__":
    sys.exit(main())
