"""FlyDSL TopK vs torch.topk on an MI350 (gfx950): a seed-like sweep of rows x N x k.

    python benchmarks/topk_device_bench.py [--dtypes fp32,bf16] [--smallest] [--out DIR]
    python benchmarks/topk_device_bench.py --dry-run      # the plan; no GPU needed

The script entry point of ``torch_flydsl.bench.topk`` (the sweep and its outputs are described
there); ``python -m torch_flydsl bench topk`` runs the same suite from an installed package.
Without a ROCm gfx950 GPU it prints why and exits 0.
"""

import sys

from torch_flydsl.bench.topk import main

if __name__ == "__main__":
    sys.exit(main())
