"""Launch one dense GEMM on cuda:0 in a fresh process and check it against ATen.

Used by the disk-cache test: FlyDSL's kernel cache only shows its behaviour across processes.
Exits non-zero when the launch or the check fails; prints JSON on its last line.
"""

import json
import sys

import torch
from gfx950_kit import GemmCase, check_gemm, run_flydsl

from torch_flydsl.templates.dense_gemm.config import BASELINE


def main(opts):
    ops = GemmCase(200, 136, 256, "tn", bias="vector").operands(torch.device("cuda", 0))
    run_flydsl(BASELINE, ops)
    torch.cuda.synchronize()
    check_gemm(ops, "launch in a fresh process")
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
