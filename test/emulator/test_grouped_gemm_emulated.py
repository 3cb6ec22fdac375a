"""The grouped GEMM kernel, compiled for gfx950 and run in the emulator, against float64.

Each case runs the real kernel on fresh random inputs with ragged group sizes (device-side
offsets), checks every group's rows against the float64 reference under the dense family's
accuracy contract (at most 2x the error of PyTorch's own per-group product in the same dtype,
see dense_cases.py), that rows past the last offset stay unwritten, that nothing outside the
output is touched, and that the race/bounds checker reports nothing.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import BaselineTolerance, run_and_compare  # noqa: E402
from torch_flydsl.templates.base import TensorMeta  # noqa: E402
from torch_flydsl.templates.grouped_gemm import (  # noqa: E402
    CURATED,
    GroupedGemmConfig,
    GroupedGemmProblem,
    check_problem,
    compile_args,
    config_fits,
    reference,
)
from torch_flydsl.templates.grouped_gemm.reference import group_bounds  # noqa: E402

from dense_cases import ATEN_FACTOR, ERROR_FLOOR, on_storage, stored  # noqa: E402

pytestmark = pytest.mark.emulator

SMALL = GroupedGemmConfig(32, 32, 32, 1, 2, 2, 0)


def grouped_b(groups, k, n, major, dtype, pad=0, offset=0):
    """[G, K, N] with each group's matrix row-major (N contiguous) or column-major (stored
    [G, N, K]), leading stride rounded up to 16 bytes plus ``pad``, and ``pad`` elements
    between groups; (view, storage)."""
    contig, other = (n, k) if major == "row" else (k, n)
    lead = -(-contig // 8) * 8 + pad
    group_stride = -(-(lead * other + pad) // 8) * 8
    base = torch.empty(offset + group_stride * groups, dtype=dtype)
    stride = (group_stride, lead, 1) if major == "row" else (group_stride, 1, lead)
    return base.as_strided((groups, k, n), stride, offset), base


def emulate_grouped(cfg, sizes, n, k, b_major="col", dtype=torch.bfloat16, spare_rows=0, pad=0, offset=0, seed=0,
                    offs=None, workgroups=None):
    """Groups of ``sizes`` rows (``spare_rows`` more rows of A/out belong to none), through the
    emulated kernel and checked. ``offs`` overrides the offsets (e.g. out-of-order values);
    ``workgroups`` the persistent grid (small: every workgroup walks several tiles)."""
    tokens = sum(sizes) + spare_rows
    a, a_base = stored(tokens, k, "row", dtype, pad, offset)
    b, b_base = grouped_b(len(sizes), k, n, b_major, dtype, pad, offset)
    out, out_base = stored(tokens, n, "row", dtype, pad, offset)
    if offs is None:
        offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    problem = check_problem(*(TensorMeta.of(t) for t in (a, b, offs, out)))
    assert isinstance(problem, GroupedGemmProblem), problem
    assert config_fits(cfg, problem) is None, config_fits(cfg, problem)
    jit_fn, args = compile_args(cfg, a, b, offs, out, problem=problem, workgroups=workgroups)

    def defined_rows(value_of_group):
        full = torch.full((tokens, n), float("nan"), dtype=torch.float64)
        for g, (s, e) in enumerate(group_bounds(offs, tokens)):
            if e > s:
                full[s:e] = value_of_group(g, s, e)
        return on_storage(full, out, out_base)

    ref = lambda: defined_rows(lambda g, s, e: reference(a, b, offs)[s:e])  # noqa: E731
    aten = lambda: defined_rows(lambda g, s, e: (a[s:e] @ b[g]).double())  # noqa: E731
    return run_and_compare(jit_fn, args, ref, inputs=[a_base, b_base], outputs=[out_base], seed=seed,
                           tolerance=BaselineTolerance(aten, ATEN_FACTOR, ERROR_FLOOR))


def test_ragged_groups_with_tails_both_b_majors():
    for major in ("col", "row"):
        rep = emulate_grouped(SMALL, [5, 40, 33], n=72, k=64, b_major=major)
        assert rep.ok, rep


@pytest.mark.parametrize("sizes, spare", [
    ([0, 17, 40], 0),            # empty first group
    ([17, 0, 0, 40], 3),         # empty middle groups, rows past the last offset
    ([17, 40, 0], 0),            # empty last group
    ([0, 0, 50, 0, 0], 0),       # all groups but one empty
    ([96], 0),                   # one group holding every token
    ([1], 0),                    # a single token
    ([31, 33, 1, 64, 2], 5),     # sizes around the 32-row tile, not multiples of it
], ids=["empty-first", "empty-middle-spare", "empty-last", "all-but-one-empty", "one-group", "one-token",
        "ragged-tails"])
def test_ragged_splits(sizes, spare):
    rep = emulate_grouped(SMALL, sizes, n=40, k=64, spare_rows=spare, seed=len(sizes))
    assert rep.ok, rep


@pytest.mark.parametrize("workgroups", [1, 2, 5])
def test_persistent_workgroups_walk_several_tiles_and_groups(workgroups):
    # Fewer workgroups than tiles: each takes tiles w, w + grid, ... across group boundaries,
    # past empty groups, and the LDS of one tile's epilogue is reused by the next tile's DMAs.
    rep = emulate_grouped(SMALL, [40, 0, 7, 0, 33, 1], n=72, k=64, spare_rows=2, workgroups=workgroups, seed=workgroups)
    assert rep.ok, rep


def test_many_groups_128_experts():
    sizes = [(7 * g) % 5 for g in range(128)]  # 0..4 tokens per expert, many empty
    rep = emulate_grouped(GroupedGemmConfig(16, 32, 64, 1, 2, 2, 0), sizes, n=32, k=64)
    assert rep.ok, rep


def test_offsets_past_the_tokens_or_decreasing_are_clamped_never_read_out_of_bounds():
    # Malformed offsets must not send a tile outside A or the output: ends are clamped to T and
    # made non-decreasing, exactly as the reference reads them.
    offs = torch.tensor([20, 10, 70, 500], dtype=torch.int32)
    rep = emulate_grouped(SMALL, [20, 0, 50, 0], n=32, k=32, offs=offs)
    assert rep.ok, rep


def test_fp16_padded_strides_and_storage_offsets():
    rep = emulate_grouped(SMALL, [9, 30, 0, 21], n=48, k=96, dtype=torch.float16, pad=8, offset=8, b_major="row")
    assert rep.ok, rep


@pytest.mark.parametrize("cfg", CURATED, ids=lambda c: c.key())
def test_every_curated_config(cfg):
    k = max(cfg.block_k, 64)
    sizes = [cfg.block_m + 3, 0, cfg.block_m // 2 + 1]
    n, workgroups, pad = cfg.block_n + 8, None, 0
    if cfg.prefetch:
        # The register-prefetch big tile (costly to emulate): one workgroup walks two tiles with
        # row tails across an empty group, stages + 1 K tiles each (unrolled pairs, the odd
        # last tile when stages is even, re-fetches past the last tile), an N tail, padded strides and storage offsets.
        sizes, n, k, workgroups = [cfg.block_m // 2 + 3, 0, 40], cfg.block_n - 8, (cfg.stages + 1) * cfg.block_k, 1
        pad = 8
    rep = emulate_grouped(cfg, sizes, n=n, k=k, seed=cfg.block_m, workgroups=workgroups, pad=pad, offset=pad)
    assert rep.ok, rep


# Issue 20: the curated configs whose stages rose past 2 (no vmcnt(0) drain in the steady loop).
NO_DRAIN = ("grp_m128n128k32_w2x2_s4_g0", "grp_m16n64k128_w1x4_s3_g0", "grp_m128n256k64_w2x4_s3_g0",
            "grp_m256n128k64_w4x2_s3_g0")


@pytest.mark.parametrize("key, b_major", list(zip(NO_DRAIN, ("col", "row", "col", "row"))), ids=NO_DRAIN)
def test_steady_loop_with_ragged_and_empty_groups_tails_strides_offsets_and_tile_walks(key, b_major):
    """stages + 2 K tiles (prologue, steady iterations, drain), groups with tails, an empty one
    between and one at the end, rows of no group, padded strides, storage offsets, and two
    workgroups each walking several tiles over group boundaries."""
    cfg = GroupedGemmConfig.from_key(key)
    assert cfg in CURATED and cfg.stages >= 3
    sizes = [cfg.block_m + 3, 0, cfg.block_m // 2 + 1, 0]
    rep = emulate_grouped(cfg, sizes, n=cfg.block_n + 8, k=(cfg.stages + 2) * cfg.block_k, b_major=b_major,
                          spare_rows=2, pad=8, offset=8, seed=cfg.block_n, workgroups=2)
    assert rep.ok, rep


def test_nan_and_inf_land_in_their_own_group_rows():
    from torch_flydsl.templates.grouped_gemm import run_emulated

    g = torch.Generator().manual_seed(1)
    sizes, n, k = [6, 10], 32, 32
    a = torch.randn(16, k, generator=g).to(torch.bfloat16)
    b = torch.randn(2, n, k, generator=g).to(torch.bfloat16).transpose(1, 2)
    a[2, 5] = float("nan")      # row 2 (group 0) -> a NaN row
    b[1, 7, 3] = float("inf")   # group 1, column 3 -> inf/nan in that column of group 1 only
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    out = torch.full((16, n), 12345.0, dtype=torch.bfloat16)
    report = run_emulated(SMALL, a, b, offs, out)
    assert report.ok, report
    ref = reference(a, b, offs)
    assert torch.isnan(out[2]).all() and torch.isnan(ref[2]).all()
    col = out[6:, 3].double()
    assert torch.equal(torch.isnan(col), torch.isnan(ref[6:, 3])) and torch.equal(torch.isinf(col), torch.isinf(ref[6:, 3]))
    finite = torch.isfinite(ref)
    assert finite.sum() > 0.8 * ref.numel()
    err = (out.double()[finite] - ref[finite]).abs().max() / ref[finite].abs().max()
    assert err < 2**-7


def test_zero_tokens_launch_nothing():
    from torch_flydsl.templates.grouped_gemm import run_emulated

    a = torch.empty(0, 64, dtype=torch.bfloat16)
    b = torch.randn(4, 64, 32).to(torch.bfloat16)
    out = torch.empty(0, 32, dtype=torch.bfloat16)
    assert run_emulated(SMALL, a, b, torch.zeros(4, dtype=torch.int32), out) is None


@pytest.mark.parametrize("b_major, workgroups", [("col", None), ("row", 3)])
def test_batched_3d_x_3d(b_major, workgroups):
    g, m, n, k = 3, 37, 40, 64
    a, a_base = stored(g * m, k, "row", torch.bfloat16)
    a = a.view(g, m, k)
    b, b_base = grouped_b(g, k, n, b_major, torch.bfloat16)
    out, out_base = stored(g * m, n, "row", torch.bfloat16)
    out = out.view(g, m, n)
    problem = check_problem(*(TensorMeta.of(t) if t is not None else None for t in (a, b, None, out)))
    assert isinstance(problem, GroupedGemmProblem) and problem.group_rows == m, problem
    jit_fn, args = compile_args(SMALL, a, b, None, out, problem=problem, workgroups=workgroups)
    rep = run_and_compare(
        jit_fn, args, lambda: on_storage(reference(a, b, None), out, out_base), inputs=[a_base, b_base],
        outputs=[out_base],
        tolerance=BaselineTolerance(lambda: on_storage(torch.bmm(a, b).double(), out, out_base), ATEN_FACTOR, ERROR_FLOOR))
    assert rep.ok, rep


def emulate_along_k(cfg, sizes, m, n, spare=0, workgroups=None, seed=0, dtype=torch.bfloat16):
    """2-D x 2-D (groups along K, the expert weight gradient): A [M, T] M-contiguous, B [T, N]
    row-major, out [G, M, N]; ``spare`` more K rows belong to no group."""
    t, groups = sum(sizes) + spare, len(sizes)
    a, a_base = stored(m, t, "col", dtype)
    b, b_base = stored(t, n, "row", dtype)
    out_base = torch.empty(groups * m * n, dtype=dtype)
    out = out_base.view(groups, m, n)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    problem = check_problem(*(TensorMeta.of(x) for x in (a, b, offs, out)))
    assert isinstance(problem, GroupedGemmProblem) and problem.along_k, problem
    assert config_fits(cfg, problem) is None, config_fits(cfg, problem)
    jit_fn, args = compile_args(cfg, a, b, offs, out, problem=problem, workgroups=workgroups)
    bounds = group_bounds(offs, t)
    aten = lambda: torch.stack([(a[:, s:e] @ b[s:e]).double() for s, e in bounds]).reshape(-1)  # noqa: E731
    return run_and_compare(jit_fn, args, lambda: reference(a, b, offs).reshape(-1), inputs=[a_base, b_base],
                           outputs=[out_base], seed=seed,
                           tolerance=BaselineTolerance(aten, ATEN_FACTOR, ERROR_FLOOR))


@pytest.mark.parametrize("sizes, spare, workgroups", [
    ([5, 40, 33], 0, None),          # K tails of every size inside 32-wide K tiles
    ([0, 70, 0, 1], 3, 2),           # empty groups (zero output), a 1-row K group, spare K rows
    ([33], 0, 1),                    # one group, K not a multiple of block_k
])
def test_groups_along_k_mask_each_groups_k_tail(sizes, spare, workgroups):
    rep = emulate_along_k(GroupedGemmConfig(32, 32, 32, 1, 2, 2, 0), sizes, m=40, n=48, spare=spare,
                          workgroups=workgroups, seed=len(sizes))
    assert rep.ok, rep


@pytest.mark.parametrize("poison", ["a", "b"])
def test_along_k_a_groups_k_tail_never_reads_the_next_groups_rows(poison):
    # Inf in the next group's K rows of one operand: a tail that read them (even times zero
    # from the other operand) would turn this group's outputs into NaN.
    from torch_flydsl.templates.grouped_gemm import run_emulated

    g = torch.Generator().manual_seed(5)
    m, n, sizes = 32, 32, [20, 25]
    a = torch.randn(sum(sizes), m, generator=g).to(torch.bfloat16).t()  # [M, T], M-contiguous
    b = torch.randn(sum(sizes), n, generator=g).to(torch.bfloat16)
    if poison == "a":
        a[:, 20:32] = float("inf")
    else:
        b[20:32] = float("inf")
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    out = torch.empty(2, m, n, dtype=torch.bfloat16)
    assert run_emulated(GroupedGemmConfig(32, 32, 32, 1, 2, 2, 0), a, b, offs, out).ok
    ref = reference(a, b, offs)
    assert torch.isfinite(ref[0]).all() and torch.isfinite(out[0].double()).all()
    assert ((out[0].double() - ref[0]).abs().max() / ref[0].abs().max()) < 2**-7


# The register-prefetch pipeline (gemm.prefetch_loop) under the grouped walks: on a small tile
# (cheap: many K tiles and tiles per workgroup) and on the curated big tile. ``slow`` (minutes);
# the default tier runs the curated big tile once (test_every_curated_config).
PREFETCH_SMALL = GroupedGemmConfig(32, 32, 32, 1, 2, 3, 0, prefetch=1)
PREFETCH_BIG = [c for c in CURATED if c.prefetch]


@pytest.mark.slow
@pytest.mark.parametrize("k_tiles", [1, 2, 4, 5])
@pytest.mark.parametrize("b_major, workgroups", [("col", 1), ("row", 3)])
def test_prefetch_loop_ragged_and_empty_groups_strides_offsets_tile_walks(k_tiles, b_major, workgroups):
    rep = emulate_grouped(PREFETCH_SMALL, [0, 40, 7, 0, 33, 1], n=72, k=32 * k_tiles, b_major=b_major, spare_rows=2,
                          pad=8, offset=8, seed=k_tiles, workgroups=workgroups,
                          dtype=torch.float16 if k_tiles % 2 else torch.bfloat16)
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("workgroups", [None, 2])
def test_prefetch_loop_groups_along_k_with_empty_and_one_row_groups(workgroups):
    # Along K an empty group runs 0 K tiles through the prefetch loop (its DMAs read zeros).
    rep = emulate_along_k(GroupedGemmConfig(32, 32, 32, 1, 2, 4, 0, prefetch=1), [0, 70, 0, 1, 130], m=40, n=48,
                          spare=3, workgroups=workgroups, seed=7)
    assert rep.ok, rep


@pytest.mark.slow
@pytest.mark.parametrize("cfg", PREFETCH_BIG, ids=lambda c: c.key())
def test_prefetch_big_tile_row_major_experts_two_tiles_per_group_and_tile_walks(cfg):
    sizes = [cfg.block_m + 40, 0, 9]
    rep = emulate_grouped(cfg, sizes, n=cfg.block_n + 24, k=6 * cfg.block_k, b_major="row", spare_rows=3, pad=8,
                          offset=8, seed=3, workgroups=2)
    assert rep.ok, rep
