"""Every shipped grouped GEMM config compiles for gfx950 on the CPU: no spills, no scratch,
static LDS as the config computes it and within 160 KiB, for both expert-weight majors (each
config once, alternating the major and dtype; the full product is marked ``slow``)."""

import itertools

import pytest
import torch

from torch_flydsl.templates.grouped_gemm import BASELINE, compile_args, search_space
from torch_flydsl.templates.gemm.limits import LDS_LIMIT_BYTES

pytestmark = pytest.mark.compile


def operands(b_major, dtype=torch.bfloat16, tokens=296, n=200, k=512, groups=8):
    """CPU stand-ins (never launched) with padded strides and a storage offset."""
    a = torch.empty(tokens * (k + 8) + 8, dtype=dtype)[8:].as_strided((tokens, k), (k + 8, 1))
    if b_major == "col":
        b = torch.empty(groups, n, k + 8, dtype=dtype)[:, :, :k].transpose(1, 2)
    else:
        b = torch.empty(groups, k, n + 8, dtype=dtype)[:, :, :n]
    offs = torch.zeros(groups, dtype=torch.int32)
    out = torch.empty(tokens, n + 8, dtype=dtype)[:, :n]
    return a, b, offs, out


def compile_one(cfg, b_major, dtype=torch.bfloat16):
    from torch_flydsl.runtime.compile import compile_gfx950

    jit_fn, args = compile_args(cfg, *operands(b_major, dtype))
    return compile_gfx950(jit_fn, *args)


def assert_clean(ck, cfg):
    (k,) = ck.kernels
    assert k.vgpr_spill == 0 and k.sgpr_spill == 0, k
    assert k.scratch_bytes == 0, k
    assert k.lds_bytes == cfg.lds_bytes <= LDS_LIMIT_BYTES, k
    assert k.max_workgroup_size == cfg.threads, k


def test_baseline_compiles_clean_with_its_name():
    ck = compile_one(BASELINE, "col")
    assert_clean(ck, BASELINE)
    assert ck.kernels[0].name == f"flydsl_grouped_gemm_ragged_bf16_nt_{BASELINE.key()}"


def _rotation():
    combos = itertools.cycle(itertools.product(("row", "col"), (torch.bfloat16, torch.float16)))
    return [(cfg, *next(combos)) for cfg in search_space("curated") if cfg != BASELINE]


@pytest.mark.parametrize("cfg, b_major, dtype", _rotation(), ids=lambda v: str(v).replace("torch.", ""))
def test_curated_config_compiles_clean(cfg, b_major, dtype):
    assert_clean(compile_one(cfg, b_major, dtype), cfg)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=["bf16", "fp16"])
@pytest.mark.parametrize("b_major", ("row", "col"))
@pytest.mark.parametrize("cfg", search_space("curated"), ids=lambda c: c.key())
def test_every_curated_config_major_and_dtype(cfg, b_major, dtype):
    assert_clean(compile_one(cfg, b_major, dtype), cfg)


@pytest.mark.parametrize("cfg", [BASELINE, *[c for c in search_space("curated") if c.block_m <= 32]],
                         ids=lambda c: c.key())
def test_weight_gradient_form_compiles_clean(cfg):
    # 2-D x 2-D with groups along K: A [M, T] M-contiguous, B [T, N] row-major, out [G, M, N].
    from torch_flydsl.runtime.compile import compile_gfx950

    m, n, t, g = 256, 200, 1000, 8
    a = torch.empty(t, m + 8, dtype=torch.bfloat16)[:, :m].t()
    b = torch.empty(t, n + 8, dtype=torch.bfloat16)[:, :n]
    out = torch.empty(g, m, n, dtype=torch.bfloat16)
    jit_fn, args = compile_args(cfg, a, b, torch.zeros(g, dtype=torch.int32), out)
    ck = compile_gfx950(jit_fn, *args)
    assert_clean(ck, cfg)
    assert ck.kernels[0].name == f"flydsl_grouped_gemm_ksplit_bf16_nn_{cfg.key()}"
