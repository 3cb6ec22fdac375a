"""Every curated dense GEMM config on a real gfx950, against ATen on the same device.

Per config, layout (nn/nt/tn/tt) and dtype (bf16/fp16): whole tiles; M and N tails with padded
leading strides, a storage offset and a bias with alpha/beta; and M=1 with an expanded [M, N]
bias. Accuracy: no more than twice ATen's own error against float64, plus a small floor. The
output's padding must stay untouched.
"""

import pytest
import torch
from gfx950_kit import check_gemm, curated_cases, run_flydsl

from torch_flydsl.templates.dense_gemm.config import CURATED

pytestmark = pytest.mark.gfx950

LAYOUTS = ("nn", "nt", "tn", "tt")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CASES = ("tiles", "tails", "decode")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cfg", CURATED, ids=[c.key() for c in CURATED])
def test_curated_config_is_as_accurate_as_aten(device, spy, cfg, layout, dtype, case):
    gemm = curated_cases(cfg, layout, DTYPES[dtype])[case]
    ops = gemm.operands(device)
    run_flydsl(cfg, ops)
    torch.cuda.synchronize(device)
    assert spy.launches == 1
    check_gemm(ops, f"{cfg.key()} {gemm}")


@pytest.mark.parametrize("cfg", CURATED[:2], ids=[c.key() for c in CURATED[:2]])
def test_the_custom_op_runs_the_kernel_not_a_fallback(device, spy, cfg):
    # What Inductor's generated code calls. The op computes PyTorch's result whenever the
    # kernel cannot run; on a gfx950 it must launch the kernel.
    ops = curated_cases(cfg, "nt", torch.bfloat16)["tails"].operands(device)
    run_flydsl(cfg, ops, via="op")
    torch.cuda.synchronize(device)
    assert spy.launches == 1
    check_gemm(ops, f"op {cfg.key()}")
