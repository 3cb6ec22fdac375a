"""Every curated TopK variant compiles for gfx950 on the CPU: no VGPR spills, no scratch, static
LDS as the config computes it (within 160 KiB; none for the register kernel), the workgroup
size of the config. The radix kernel spills no SGPRs either; the register kernel's unrolled
networks hold enough compare masks in SGPRs that LLVM parks a few loop-invariant SGPRs (kernel
arguments) in VGPR lanes (``v_writelane`` once at entry, ``v_readlane`` once per row, none in the
streaming loop: no memory), at most 16 (bf16 k_pad 16: 14)."""

import pytest
import torch

from torch_flydsl.templates.topk.config import CURATED, LDS_LIMIT, REGISTER
from torch_flydsl.templates.topk.launcher import allocate, checked_problem, compile_args

pytestmark = pytest.mark.compile


# The register configs compile in about 5 s each (unrolled networks): behind -m slow; the
# rendered-kernel test checks one of them (k_pad 8) in the default tier.
CASES = [pytest.param(c, marks=pytest.mark.slow) if c.algorithm == REGISTER else c for c in CURATED]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.key())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_curated_config_compiles_clean(cfg, dtype):
    from torch_flydsl.runtime.compile import compile_gfx950

    x = torch.empty(100, 32768, dtype=dtype)  # lazy CPU stand-in, never launched
    problem = checked_problem(x, cfg.k_pad, -1, cfg.k_pad > 8, True, False)
    jit_fn, args = compile_args(cfg, problem, x, *allocate(x, problem))
    (k,) = compile_gfx950(jit_fn, *args).kernels
    assert k.vgpr_spill == 0 and k.scratch_bytes == 0, k
    assert k.sgpr_spill <= (16 if cfg.algorithm == REGISTER else 0), k
    assert k.lds_bytes == cfg.lds_bytes() <= LDS_LIMIT, k
    assert k.max_workgroup_size == cfg.threads, k
