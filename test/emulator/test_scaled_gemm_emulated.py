"""The MX scaled GEMM family, compiled for gfx950 and executed in the emulator.

Each case runs on fresh random MX codes and random E8M0 scales that vary per 32-block along K
(and per row/column), against the family's exact float64 reference, with the harness's
checks: no checker finding, every output element written, no byte changed outside the output
(whole storages of every operand, scale and output are watched).

Accuracy contract (``emulate_scaled``): the inputs are exact, so a correct kernel's only
errors are fp32 accumulation and the final rounding. The baseline is what an fp32-accumulating
implementation computes from the exact inputs (``reference.fp32_accumulated``: each 32-block's
scaled dot products exact, summed block by block in fp32, bias in fp32, rounded once); the
kernel's max error against the float64 reference may be at most 2x the baseline's own, plus
2^-16 of max|ref| (room for another fp32 summation order; far below one bf16/fp16 rounding,
so a wrong scale, a lost block or a double rounding fails).

The scaled MFMA follows AMD's hardware semantics in the emulator (FP8 operands as two runs of
16 K values per lane, each scale byte applying to an instruction K block), so these tests hold
the kernel to the hardware, not to FlyDSL's MFMA_Scale atom.
"""

from __future__ import annotations

from typing import Optional

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import BaselineTolerance, run_and_compare  # noqa: E402
from torch_flydsl.templates.base import TensorMeta  # noqa: E402
from torch_flydsl.templates.scaled_gemm import (  # noqa: E402
    BASELINE,
    ScaledGemmConfig,
    ScaledGemmProblem,
    check_problem,
    compile_args,
    config_fits,
    reference,
    search_space,
)
from torch_flydsl.templates.gemm.limits import DEEP_STAGES  # noqa: E402
from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE  # noqa: E402
from torch_flydsl.templates.scaled_gemm.reference import fp32_accumulated  # noqa: E402

from dense_cases import on_storage, stored  # noqa: E402

pytestmark = pytest.mark.emulator

FACTOR = 2.0
FLOOR = 2.0**-16
SCALES = (119, 135)  # E8M0 codes 2^-8 .. 2^8 by default
FP16_SCALES = (106, 118)  # keeps random sums (K up to 1536) inside float16's range


def mx_codes(size: int, fmt: str, g: torch.Generator, specials: bool = False) -> torch.Tensor:
    """Random bytes of an MX format; without ``specials``, NaN/Inf codes become finite ones."""
    c = torch.randint(0, 256, (size,), generator=g, dtype=torch.uint8)
    if not specials:
        if fmt == "e4m3":
            c[(c & 0x7F) == 0x7F] ^= 1  # NaN -> +-448
        elif fmt == "e5m2":
            c[(c & 0x7C) == 0x7C] &= 0xFB  # Inf/NaN -> finite (exponent 30)
    return c


def mx_matrix(rows, k, fmt, g, pad=0, offset=0, tight=False, specials=False):
    """A K-contiguous ``[rows, K]`` MX matrix (A as is; B is its transpose) with a leading stride
    of its K bytes rounded up to 16 plus ``pad`` bytes and ``offset`` bytes into its storage;
    returns (view in the MX dtype, backing uint8 storage). ``tight``: the storage ends at the
    matrix's last byte."""
    kb = FORMATS[fmt].row_bytes(k)
    lead = -(-kb // 16) * 16 + pad
    size = offset + lead * (rows - 1) + kb if tight else offset + lead * rows
    base = mx_codes(size, fmt, g, specials)
    return base.view(DTYPE_OF_FORMAT[fmt]).as_strided((rows, kb), (lead, 1), offset), base


def scale_matrix(rows, k, g, codes=SCALES, extra_rows=0, pad=0, offset=0):
    """``[rows + extra_rows, K/32]`` E8M0 scales (row-major, leading stride K/32 + ``pad``,
    ``offset`` bytes in), random codes in ``codes`` (inclusive); (view, uint8 storage)."""
    blocks = k // 32
    total = rows + extra_rows
    lead = blocks + pad
    base = torch.randint(codes[0], codes[1] + 1, (offset + lead * total,), generator=g, dtype=torch.uint8)
    return base.view(SCALE_DTYPE).as_strided((total, blocks), (lead, 1), offset), base


@torch.no_grad()
def emulate_scaled(cfg: ScaledGemmConfig, m, n, k, formats=("e4m3", "e4m3"), out_dtype=torch.bfloat16,
                   bias: Optional[str] = None, pad=0, offset=0, tight=False, scales=SCALES, scale_rows_extra=0,
                   scale_fn=None, seed=0):
    """Run ``out = (A * 2^sa) @ (B * 2^sb) [+ bias]`` through the emulated kernel and check it
    (harness + the accuracy contract above). ``pad``/``offset`` are in bytes for the operands
    (multiples of 16) and scales (multiples of 4); the output gets ``pad // 2`` elements of row
    padding and ``offset // 2`` elements of offset. ``bias``: None, "vector" or "expanded".
    ``scale_fn(sa_view, sb_view)`` may overwrite the scale codes in place."""
    g = torch.Generator().manual_seed(seed)
    fa, fb = formats
    a, a_base = mx_matrix(m, k, fa, g, pad, offset, tight)
    bt, b_base = mx_matrix(n, k, fb, g, pad, offset, tight)
    b = bt.t()
    sa, sa_base = scale_matrix(m, k, g, scales, scale_rows_extra, pad // 4, offset // 4 * 4)
    sb, sb_base = scale_matrix(n, k, g, scales, scale_rows_extra, pad // 4, offset // 4 * 4)
    if scale_fn is not None:
        scale_fn(sa.view(torch.uint8), sb.view(torch.uint8))
    out, out_base = stored(m, n, "row", out_dtype, pad // 2, offset // 2, tight)
    inputs = [a_base, b_base, sa_base, sb_base]
    bias_t = None
    if bias is not None:
        vec = torch.randn(n, generator=g).to(out_dtype) * 64
        bias_t = vec if bias == "vector" else vec.expand(m, n)
        inputs.append(vec)
    meta = [TensorMeta.of(t) for t in (a, b, sa, sb, out)]
    problem = check_problem(*meta, TensorMeta.of(bias_t) if bias_t is not None else None)
    assert isinstance(problem, ScaledGemmProblem), problem
    assert config_fits(cfg, problem) is None, config_fits(cfg, problem)
    jit_fn, args = compile_args(cfg, a, b, sa, sb, out, bias_t)
    bias_vec = None if bias_t is None else (bias_t if bias_t.dim() == 1 else bias_t[0])
    tolerance = BaselineTolerance(
        lambda: on_storage(fp32_accumulated(a, b, sa, sb, bias_vec, out_dtype), out, out_base), FACTOR, FLOOR
    )

    def expected():
        ref = reference(a, b, sa, sb, bias_vec)
        # The contract compares finite numbers: a case whose result overflows the output dtype
        # would pass vacuously (inf - inf), so it is a broken test, not a passing kernel.
        assert torch.isfinite(ref.to(out_dtype)).all(), "test data overflows the output dtype"
        return on_storage(ref, out, out_base)

    return run_and_compare(jit_fn, args, expected, inputs=inputs, outputs=[out_base], tolerance=tolerance,
                           randomize=False)


FORMAT_PAIRS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e2m1", "e4m3"),
                ("e4m3", "e5m2")]
SMALL = ScaledGemmConfig(32, 32, 256, 1, 2, 2, 0)


@pytest.mark.parametrize("formats", FORMAT_PAIRS, ids="x".join)
def test_formats_with_scales_varying_per_block_and_tails(formats):
    # M and N tails, two K tiles of two MFMA steps each: every scale block of a row differs.
    rep = emulate_scaled(SMALL, 40, 36, 512, formats, seed=FORMAT_PAIRS.index(formats))
    assert rep.ok, rep


def test_fp16_output_with_bias_padding_and_offsets():
    rep = emulate_scaled(SMALL, 33, 40, 256, ("e4m3", "e2m1"), out_dtype=torch.float16, bias="vector", pad=16,
                         offset=16, scales=FP16_SCALES)
    assert rep.ok, rep


def test_bias_expanded_to_m_by_n_is_read_as_a_vector():
    rep = emulate_scaled(SMALL, 24, 40, 256, ("e2m1", "e2m1"), bias="expanded", seed=3)
    assert rep.ok, rep


def test_scale_rows_past_m_and_n_and_padded_scale_strides_are_never_read():
    # torch 2.13's _scaled_mm on ROCm wants round_up(M, 128) rows of scales; the padding rows
    # and the padding of each scale row must stay untouched and unread (their codes are NaN
    # here: a read would show in the result).
    def poison_padding(sa, sb):
        sa[40:] = 0xFF
        sb[36:] = 0xFF

    rep = emulate_scaled(SMALL, 40, 36, 512, ("e4m3", "e2m1"), pad=16, offset=32, scale_rows_extra=88,
                         scale_fn=poison_padding)
    assert rep.ok, rep


def test_operands_that_end_at_their_last_byte_are_read_in_bounds():
    # Storages end right after each operand's last element (no padding after the last row);
    # rows past M/N are clamped, never fetched past the end.
    rep = emulate_scaled(SMALL, 38, 50, 256, ("e4m3", "e4m3"), tight=True, seed=5)
    assert rep.ok, rep


def test_one_k_tile_in_a_four_stage_pipeline():
    cfg = ScaledGemmConfig(16, 16, 512, 1, 1, 4)
    rep = emulate_scaled(cfg, 10, 20, 512, ("e4m3", "e2m1"), seed=6)
    assert rep.ok, rep


def test_many_k_tiles_wrap_three_stages():
    cfg = ScaledGemmConfig(32, 32, 128, 1, 1, 3)
    rep = emulate_scaled(cfg, 32, 32, 7 * 128, ("e5m2", "e4m3"), seed=7)
    assert rep.ok, rep


def test_group_m_block_order_over_many_tiles():
    cfg = ScaledGemmConfig(16, 16, 128, 1, 1, 2, 2)  # 5 x 3 tiles, group-M 2
    rep = emulate_scaled(cfg, 16 * 5 - 3, 16 * 3, 256, ("e2m1", "e2m1"), seed=8)
    assert rep.ok, rep


CURATED = search_space("curated")
OUTS = (torch.bfloat16, torch.float16)


def pairs_for(cfg, out):
    """The format pairs of FORMAT_PAIRS that ``cfg`` compiles for (all of them but for the MXFP4-only
    deep tiles)."""
    return [p for p in FORMAT_PAIRS if cfg.fits_formats(FORMATS[p[0]], FORMATS[p[1]], out)]


@pytest.mark.parametrize("i", range(len(CURATED)), ids=[c.key() for c in CURATED])
def test_every_curated_config(i):
    # Every shipped config: M and N tails, three K tiles (the pipeline wraps its stages),
    # padded leading strides and storage offsets, formats / output dtype / bias rotating.
    # The deep configs (stages >= DEEP_STAGES): a steady chunk and a short last chunk, at least
    # stages + 1 tiles (the ring wraps); formats rotate over the pairs the config fits.
    cfg = CURATED[i]
    tiles = max(cfg.stages + 1, cfg.chunk + 2) if cfg.stages >= DEEP_STAGES else 3
    m, n, k = 2 * cfg.block_m - 8, cfg.block_n + 24, tiles * cfg.block_k
    out = OUTS[i % 2]
    rep = emulate_scaled(cfg, m, n, k, pairs_for(cfg, out)[i % len(pairs_for(cfg, out))], out_dtype=out,
                         bias="vector" if i % 3 == 0 else None, pad=16, offset=16,
                         scales=SCALES if out == torch.bfloat16 else FP16_SCALES, seed=i)
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("bias", [None, "vector"])
@pytest.mark.parametrize("out", OUTS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("formats", FORMAT_PAIRS, ids="x".join)
@pytest.mark.parametrize("cfg", CURATED, ids=str)
def test_every_curated_config_format_output_and_bias(cfg, formats, out, bias):
    if formats not in pairs_for(cfg, out):
        pytest.skip(f"{cfg.key()} does not fit {formats} (an MXFP4-only tile)")
    rep = emulate_scaled(cfg, 2 * cfg.block_m - 8, cfg.block_n + 24, 2 * cfg.block_k, formats, out_dtype=out,
                         bias=bias, pad=16, offset=16, scales=SCALES if out == torch.bfloat16 else FP16_SCALES)
    assert rep.ok, rep


# The chunked pipeline (scale slots of ``chunk`` K tiles): steady loop over several chunks and a
# last chunk shorter than the others (K not a multiple of chunk tiles), with M/N tails, padded
# strides and storage offsets.
CHUNKED = [pytest.param("mx_m16n32k512_w1x2_s4_g0_c4", 6, ("e5m2", "e4m3"), marks=pytest.mark.slow, id="s4_c4"),
           pytest.param("mx_m32n16k256_w2x1_s3_g0_c2", 5, ("e2m1", "e4m3"), id="s3_c2")]


@pytest.mark.parametrize("key, tiles, formats", CHUNKED)
def test_chunked_scales_over_a_steady_loop_and_a_short_last_chunk(key, tiles, formats):
    cfg = ScaledGemmConfig.from_key(key)
    assert cfg in CURATED and tiles % cfg.chunk and tiles > cfg.chunk  # a steady chunk, then a short one
    rep = emulate_scaled(cfg, cfg.block_m + 7, 2 * cfg.block_n - 5, tiles * cfg.block_k, formats, pad=16, offset=16,
                         seed=21)
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(CURATED)), ids=[c.key() for c in CURATED])
def test_every_curated_config_runs_its_steady_loop(i):
    # 2 full chunks and one of a single tile: the unrolled steady loop, its slot flip and the drain.
    cfg = CURATED[i]
    pairs = pairs_for(cfg, torch.bfloat16)
    rep = emulate_scaled(cfg, cfg.block_m + 8, cfg.block_n - 8, (2 * cfg.chunk + 1) * cfg.block_k,
                         pairs[(i + 1) % len(pairs)], pad=16, offset=16, seed=40 + i)
    assert rep.ok, rep


# The register-prefetch pipeline (``scaled_gemm.prefetch``; exhaustive-space configs with the
# ``_rp`` suffix): tile counts that leave a remainder after the loop's unroll (lcm(2, chunk)),
# a last chunk shorter than the others, a single K tile (the prologue's clamped fetches and the
# last iteration's unused read), four stages, mixed formats, M/N tails, padded strides and
# storage offsets.
PREFETCH = [("mx_m64n64k128_w2x2_s3_g0_c2_rp", 7, ("e4m3", "e4m3")),
            ("mx_m32n64k256_w1x4_s3_g0_c4_rp", 6, ("e2m1", "e4m3")),
            ("mx_m32n32k128_w1x2_s4_g0_rp", 5, ("e2m1", "e2m1")),
            ("mx_m32n32k256_w1x2_s3_g0_c2_rp", 1, ("e5m2", "e4m3"))]


@pytest.mark.parametrize("key, tiles, formats", PREFETCH, ids=[p[0] for p in PREFETCH])
def test_register_prefetch_pipeline(key, tiles, formats):
    cfg = ScaledGemmConfig.from_key(key)
    assert cfg.prefetch and cfg in search_space("exhaustive")
    _tails_strides_offsets(cfg, tiles, formats, seed=60 + tiles)


def _tails_strides_offsets(cfg, tiles, formats, seed):
    """``tiles`` K tiles with M and N tails, padded strides, storage offsets and (odd ``tiles``)
    a bias."""
    rep = emulate_scaled(cfg, 2 * cfg.block_m - 8, cfg.block_n + 24, tiles * cfg.block_k, formats, pad=16, offset=16,
                         bias="vector" if tiles % 2 else None, seed=seed)
    assert rep.ok, rep


# The ping-pong pipeline (``scaled_gemm.pingpong``; key suffix ``_pp``): two wave groups a
# segment apart, A fetched in halves by group 0 and B by group 1. Odd and even tile counts (the
# loop is unrolled by the 2 stages), a single K tile, 2 MFMA K steps per tile (the scale word's
# second byte), mixed formats, M/N tails, padded strides and storage offsets.
PINGPONG = [("mx_m64n64k128_w2x2_s2_g0_pp", 7, ("e4m3", "e4m3")),
            ("mx_m64n64k128_w2x2_s2_g0_pp", 1, ("e2m1", "e4m3")),
            ("mx_m32n64k256_w1x4_s2_g0_pp", 4, ("e5m2", "e2m1")),
            ("mx_m128n128k128_w2x4_s2_g8_pp", 5, ("e4m3", "e2m1"))]


@pytest.mark.parametrize("key, tiles, formats", PINGPONG, ids=[f"{p[0]}-{p[1]}" for p in PINGPONG])
def test_pingpong_pipeline(key, tiles, formats):
    cfg = ScaledGemmConfig.from_key(key)
    assert cfg.pingpong and cfg in search_space("exhaustive")
    _tails_strides_offsets(cfg, tiles, formats, seed=80 + tiles)
