"""Dense GEMM numerics in the CPU emulator, beyond the emulator suite's matrix: group-M block
order over many tiles, a single K tile under a 4-stage pipeline, decode-sized M, expanded and
beta == 0 biases, N tails inside a 16-byte store vector, and nothing written outside out[:M, :N].
"""

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.dense_gemm import BASELINE, compile_args, reference  # noqa: E402
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig  # noqa: E402

pytestmark = pytest.mark.emulator

TOL = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-10}
MAJOR = {"n": "row", "t": "col"}


def stored(rows, cols, major, dtype, pad=0, offset=0):
    """[rows, cols] in the given major; the leading stride is the contiguous extent rounded up
    to 8 elements (16 bytes, as the eligibility gate requires) plus ``pad``."""
    natural = cols if major == "row" else rows
    lead = -(-natural // 8) * 8 + pad
    other = rows if major == "row" else cols
    base = torch.empty(offset + lead * other, dtype=dtype)
    stride = (lead, 1) if major == "row" else (1, lead)
    return base.as_strided((rows, cols), stride, offset), base


def emulate_gemm(cfg, m, n, k, layout, dtype=torch.bfloat16, pad=0, offset=0, bias=None, alpha=1.0, beta=1.0,
                 seed=0, randomize_bias=True):
    from torch_flydsl.emulator import run_and_compare

    a, a_base = stored(m, k, MAJOR[layout[0]], dtype, pad, offset)
    b, b_base = stored(k, n, MAJOR[layout[1]], dtype, pad, offset)
    out, out_base = stored(m, n, "row", dtype, pad, offset)
    inputs = [a_base, b_base]
    bias_t = None
    if bias == "vector":
        bias_t = torch.empty(n, dtype=dtype)
    elif bias == "expanded":
        bias_t = torch.empty(n, dtype=dtype).expand(m, n)
    elif bias == "nan":
        bias_t = torch.full((n,), float("nan"), dtype=dtype)
    if bias_t is not None and randomize_bias and bias != "nan":
        inputs.append(bias_t if bias_t.dim() == 1 else bias_t[0])
    jit_fn, args = compile_args(cfg, a, b, out, bias_t, alpha, beta)

    def ref():
        full = torch.full(out_base.shape, float("nan"), dtype=torch.float64)
        used_bias = None if beta == 0.0 else bias_t
        full.as_strided(out.shape, out.stride(), out.storage_offset())[:] = reference(a, b, used_bias, alpha, beta)
        return full

    rep = run_and_compare(jit_fn, args, ref, inputs=inputs, outputs=[out_base], tolerance=TOL[dtype], seed=seed)
    # The harness poisons the whole output storage with NaN: whatever lies outside out[:M, :N]
    # (padding, the storage offset) must still be NaN.
    inside = torch.zeros(out_base.shape, dtype=torch.bool)
    inside.as_strided(out.shape, out.stride(), out.storage_offset())[:] = True
    return rep, bool(torch.isnan(out_base[~inside].to(torch.float64)).all())


def test_group_m_block_order_over_many_tiles():
    cfg = DenseGemmConfig(64, 64, 64, 2, 2, 2, 2)
    rep, untouched = emulate_gemm(cfg, 64 * 5 - 3, 64 * 3 + 8, 128, "nt", pad=8, offset=8)
    assert rep.ok, rep
    assert untouched


def test_group_m_with_xcd_remap():
    # 4 x 4 = 16 tiles split evenly over 8 XCDs, so the XCD remap is active.
    cfg = DenseGemmConfig(32, 32, 32, 1, 1, 2, 2)
    rep, untouched = emulate_gemm(cfg, 32 * 4 - 6, 32 * 4, 64, "tn", pad=8)  # even M: see eligibility
    assert rep.ok, rep
    assert untouched


@pytest.mark.parametrize("layout", ["tt", "nn"])
def test_single_k_tile_with_a_four_stage_pipeline(layout):
    cfg = DenseGemmConfig(16, 64, 128, 1, 2, 4, 0)
    assert cfg.is_valid()
    rep, untouched = emulate_gemm(cfg, 6, 70, 128, layout, pad=8)
    assert rep.ok, rep
    assert untouched


def test_many_k_tiles_wrap_three_stages():
    cfg = DenseGemmConfig(64, 64, 64, 2, 2, 3, 0)
    rep, _ = emulate_gemm(cfg, 64, 64, 7 * 64, "tn", dtype=torch.float16)
    assert rep.ok, rep


def test_decode_row_with_bias():
    cfg = DenseGemmConfig(16, 128, 128, 1, 4, 2, 0)
    rep, untouched = emulate_gemm(cfg, 1, 200, 256, "nt", bias="vector", alpha=1.0, beta=1.0)
    assert rep.ok, rep
    assert untouched


def test_expanded_bias_is_read_as_a_vector():
    rep, _ = emulate_gemm(BASELINE, 130, 72, 64, "nn", bias="expanded", alpha=-0.5, beta=0.25)
    assert rep.ok, rep


def test_beta_zero_ignores_a_nan_bias_like_addmm():
    rep, _ = emulate_gemm(BASELINE, 40, 48, 64, "nt", bias="nan", alpha=2.0, beta=0.0)
    assert rep.ok, rep


def test_n_tail_inside_a_store_vector_with_aligned_ldc():
    # N = 100: the last 16-byte vector of each row holds 4 valid columns; ldc = 104 + 8 keeps
    # rows 16-byte aligned, so full vectors go out whole and the tail element by element.
    rep, untouched = emulate_gemm(BASELINE, 70, 100, 64, "tt", pad=8)
    assert rep.ok, rep
    assert untouched
