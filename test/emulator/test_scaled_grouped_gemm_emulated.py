"""The MXFP8 grouped GEMM kernel, compiled for gfx950 and run in the emulator, against the exact
float64 product of the dequantized operands, group by group.

Ragged and empty groups, rows past the last offset (never written), scales varying per
32-block along K and per row/column (including the E8M0 extremes and the NaN code), several
tiles per persistent workgroup, and every curated config. Accuracy contract as the scaled
family's: at most 2x the error of an fp32-accumulated, once-rounded reference, plus 2^-16
relative to the largest output.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import BaselineTolerance, run_and_compare  # noqa: E402
from torch_flydsl.templates.base import TensorMeta  # noqa: E402
from torch_flydsl.templates.grouped_gemm.reference import group_bounds  # noqa: E402
from torch_flydsl.templates.scaled_gemm.reference import dequantize, fp32_accumulated  # noqa: E402
from torch_flydsl.templates.scaled_grouped_gemm import (  # noqa: E402
    CURATED,
    ScaledGroupedConfig,
    ScaledGroupedProblem,
    check_problem,
    compile_args,
    config_fits,
    reference,
)

from dense_cases import on_storage  # noqa: E402

pytestmark = pytest.mark.emulator

SMALL = ScaledGroupedConfig(32, 32, 128, 1, 2, 2, 0)
E8M0 = torch.float8_e8m0fnu


def e4m3_codes(numel, g):
    c = torch.randint(0, 256, (numel,), generator=g, dtype=torch.uint8)
    c[(c & 0x7F) == 0x7F] ^= 1  # NaN codes -> finite
    return c


def emulate_mx_grouped(cfg, sizes, n, k, spare_rows=0, seed=0, workgroups=None, scale_codes=(120, 134)):
    g = torch.Generator().manual_seed(seed)
    t, groups = sum(sizes) + spare_rows, len(sizes)
    a_base = e4m3_codes(t * k + 16, g)
    a = a_base[16:].view(torch.float8_e4m3fn).view(t, k)
    b_base = e4m3_codes(groups * n * k, g)
    b = b_base.view(torch.float8_e4m3fn).view(groups, n, k).transpose(1, 2)
    sa = torch.randint(scale_codes[0], scale_codes[1] + 1, (t + 3, k // 32), generator=g, dtype=torch.uint8)
    sb = torch.randint(scale_codes[0], scale_codes[1] + 1, (groups, n * k // 32), generator=g, dtype=torch.uint8)
    sa_e, sb_e = sa.view(E8M0), sb.view(E8M0)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    out_base = torch.empty(t * (n + 8), dtype=torch.bfloat16)
    out = out_base.as_strided((t, n), (n + 8, 1))
    problem = check_problem(*(TensorMeta.of(x) for x in (a, b, sa_e, sb_e, offs, out)))
    assert isinstance(problem, ScaledGroupedProblem), problem
    assert config_fits(cfg, problem) is None, config_fits(cfg, problem)
    jit_fn, args = compile_args(cfg, a, b, sa_e, sb_e, offs, out, problem=problem, workgroups=workgroups)

    def rows_of_groups(fill):
        full = torch.full((t, n), float("nan"), dtype=torch.float64)
        sbg = sb_e.view(groups, n, k // 32)
        for gi, (s, e) in enumerate(group_bounds(offs, t)):
            if e > s:
                full[s:e] = fill(gi, s, e, sbg)
        return on_storage(full, out, out_base)

    expected = lambda: rows_of_groups(lambda gi, s, e, sbg: reference(a, b, sa_e, sb_e, offs)[s:e])  # noqa: E731
    baseline = lambda: rows_of_groups(  # noqa: E731
        lambda gi, s, e, sbg: fp32_accumulated(a[s:e], b[gi], sa_e[s:e], sbg[gi], None, torch.bfloat16))
    return run_and_compare(jit_fn, args, expected, inputs=[], outputs=[out_base], randomize=False,
                           tolerance=BaselineTolerance(baseline, 2.0, 2.0**-16))


def test_ragged_groups_with_scales_varying_per_block():
    rep = emulate_mx_grouped(SMALL, [5, 40, 0, 33], n=48, k=256, spare_rows=3)
    assert rep.ok, rep


@pytest.mark.parametrize("sizes, spare", [([0, 17, 40], 0), ([17, 0, 0, 40], 2), ([0, 0, 50, 0], 0), ([1], 0),
                                          ([31, 33, 1, 2], 5)],
                         ids=["empty-first", "empty-middle", "all-but-one-empty", "one-token", "ragged-tails"])
def test_ragged_splits(sizes, spare):
    rep = emulate_mx_grouped(SMALL, sizes, n=32, k=128, spare_rows=spare, seed=len(sizes))
    assert rep.ok, rep


@pytest.mark.parametrize("workgroups", [1, 3])
def test_persistent_workgroups_walk_several_tiles_and_groups(workgroups):
    rep = emulate_mx_grouped(SMALL, [40, 0, 7, 33], n=64, k=256, workgroups=workgroups, seed=workgroups)
    assert rep.ok, rep


def test_e8m0_extremes_stay_exact():
    # Codes 2^-127..2^127 across rows and blocks: products of the extremes are still exact in
    # fp32 when paired (2^-127 * 2^127); the bf16 output keeps them finite for these codes.
    rep = emulate_mx_grouped(SMALL, [20, 12], n=32, k=256, scale_codes=(100, 150), seed=7)
    assert rep.ok, rep


@pytest.mark.parametrize("cfg", CURATED, ids=lambda c: c.key())
def test_every_curated_config(cfg):
    k = cfg.block_k * 2
    rep = emulate_mx_grouped(cfg, [cfg.block_m + 3, 0, cfg.block_m // 2 + 1], n=cfg.block_n + 16, k=k,
                             seed=cfg.block_m)
    assert rep.ok, rep


def test_chunked_scales_over_ragged_and_empty_groups():
    # A curated 2-tile scale chunk over 5 K tiles (steady chunks and a short last one) in every
    # group's tiles, empty groups first, between and last, scale codes 2^-27 .. 2^27.
    cfg = next(c for c in CURATED if c.key() == "mxgrp_m32n16k256_w2x1_s3_g0_c2")
    rep = emulate_mx_grouped(cfg, [0, 37, 0, 5, 0], n=40, k=5 * 256, spare_rows=3, seed=9, scale_codes=(100, 154))
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("cfg", CURATED, ids=lambda c: c.key())
def test_every_curated_config_runs_its_steady_loop(cfg):
    k = cfg.block_k * (2 * cfg.chunk + 1)
    rep = emulate_mx_grouped(cfg, [cfg.block_m - 3, 0, 5], n=cfg.block_n + 16, k=k, seed=cfg.block_n)
    assert rep.ok, rep


def test_nan_scale_code_poisons_exactly_its_rows_of_its_group():
    from torch_flydsl.templates.scaled_grouped_gemm import run_emulated

    g = torch.Generator().manual_seed(3)
    t, n, k, sizes = 24, 32, 128, [10, 14]
    a = e4m3_codes(t * k, g).view(torch.float8_e4m3fn).view(t, k)
    b = e4m3_codes(2 * n * k, g).view(torch.float8_e4m3fn).view(2, n, k).transpose(1, 2)
    sa = torch.full((t, k // 32), 127, dtype=torch.uint8)
    sb = torch.full((2, n * k // 32), 127, dtype=torch.uint8)
    sa[12, 1] = 0xFF  # row 12 (group 1): NaN scale -> NaN row
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    out = torch.empty(t, n, dtype=torch.bfloat16)
    assert run_emulated(SMALL, a, b, sa.view(E8M0), sb.view(E8M0), offs, out).ok
    ref = reference(a, b, sa.view(E8M0), sb.view(E8M0), offs)
    assert torch.isnan(out[12]).all() and torch.isnan(ref[12]).all()
    others = [r for r in range(t) if r != 12]
    err = (out[others].double() - ref[others]).abs().max() / ref[others].abs().max()
    assert torch.isfinite(out[others].double()).all() and err < 2**-7
