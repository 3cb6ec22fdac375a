"""Every curated RMSNorm config compiles for gfx950 on the CPU: no spills, no scratch, static LDS
only for the per-wave partials of multi-wave rows (two buffers of one fp32 per wave), the block
size and kernel name the config says (each config once, dtype and weight rotating; the
instruction mix is test_rmsnorm_rendered's)."""

import itertools

import pytest
import torch

from torch_flydsl.templates.rmsnorm import CURATED, compile_args
from torch_flydsl.templates.rmsnorm.launcher import outputs_for

pytestmark = pytest.mark.compile


def compile_one(cfg, dtype=torch.bfloat16, weight=True, n=4097):
    """CPU stand-ins (never launched)."""
    from torch_flydsl.runtime.compile import compile_gfx950

    x = torch.empty(3, n, dtype=dtype)
    w = torch.empty(n, dtype=dtype) if weight else None
    y, rstd = outputs_for(x)
    jit_fn, args = compile_args(cfg, x, w, y, rstd, 1e-6)
    return compile_gfx950(jit_fn, *args)


def _rotation():
    combos = itertools.cycle(itertools.product((torch.bfloat16, torch.float16, torch.float32), (True, False)))
    return [(cfg, *next(combos)) for cfg in CURATED]


@pytest.mark.parametrize("cfg, dtype, weight", _rotation(), ids=lambda v: str(v).replace("torch.", ""))
def test_curated_config_compiles_clean(cfg, dtype, weight):
    (k,) = compile_one(cfg, dtype, weight).kernels
    assert k.vgpr_spill == 0 and k.sgpr_spill == 0, k
    assert k.scratch_bytes == 0, k
    assert k.lds_bytes == (2 * cfg.waves * 4 if cfg.waves > 1 else 0), k
    assert k.max_workgroup_size == cfg.threads, k
    assert k.name == f"flydsl_rmsnorm_{ {torch.bfloat16: 'bf16', torch.float16: 'fp16', torch.float32: 'fp32'}[dtype]}_{cfg.key()}_w{int(weight)}"
