"""Every curated MXFP8 grouped GEMM config compiles for gfx950 on the CPU: no spills, no scratch,
static LDS as the config computes it (within 160 KiB)."""

import pytest
import torch

from torch_flydsl.templates.scaled_gemm.config import LDS_LIMIT_BYTES
from torch_flydsl.templates.scaled_gemm.problem import E4M3
from torch_flydsl.templates.scaled_grouped_gemm import CURATED, compile_args

pytestmark = pytest.mark.compile


def operands(tokens=296, n=256, k=1024, groups=8):
    """CPU stand-ins (never launched): padded A rows and output, unswizzled scales."""
    fp8, e8m0 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    a = torch.empty(tokens, k + 16, dtype=torch.uint8)[:, :k].view(fp8)
    b = torch.empty(groups, n, k, dtype=torch.uint8).view(fp8).transpose(1, 2)
    sa = torch.empty(tokens, k // 32, dtype=torch.uint8).view(e8m0)
    sb = torch.empty(groups, n * k // 32, dtype=torch.uint8).view(e8m0)
    offs = torch.zeros(groups, dtype=torch.int32)
    out = torch.empty(tokens, n + 8, dtype=torch.bfloat16)[:, :n]
    return a, b, sa, sb, offs, out


@pytest.mark.parametrize("cfg", CURATED, ids=lambda c: c.key())
def test_curated_config_compiles_clean(cfg):
    from torch_flydsl.runtime.compile import compile_gfx950

    jit_fn, args = compile_args(cfg, *operands())
    (k,) = compile_gfx950(jit_fn, *args).kernels
    assert k.vgpr_spill == 0 and k.sgpr_spill == 0 and k.scratch_bytes == 0, k
    assert k.lds_bytes == cfg.lds_bytes(E4M3, E4M3) <= LDS_LIMIT_BYTES, k
    assert k.max_workgroup_size == cfg.threads, k
