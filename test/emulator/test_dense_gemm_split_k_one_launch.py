"""Dense split-K in one launch, in the CPU emulator.

Every workgroup stores its fp32 partial tile, releases it and counts itself in its output
tile's counter (agent-scope acq_rel atomic); the one that counts last sums the partials in
split order and runs the epilogue. Checked here: results against float64 on fresh random
inputs (M/N/K tails, padded leading strides, storage offsets, split_k 4 and 8, M = 1), with
the harness's contract (no checker finding, the global race checker included; every output
written; nothing else touched); the same bits whichever workgroup arrives last (the emulator
runs workgroups in the order given); counters back at zero after every launch, so the one
workspace serves the next call; and planted handoffs without their release or their acquire
reported as global races.
"""

import random

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import emulate  # noqa: E402
from torch_flydsl.templates.dense_gemm import launcher, reference  # noqa: E402
from torch_flydsl.templates.dense_gemm.config import SPLIT_K_COUNTERS, DenseGemmConfig, config_fits  # noqa: E402
from torch_flydsl.templates.dense_gemm.launcher import checked_problem, compile_args  # noqa: E402

from dense_cases import emulate_gemm, stored  # noqa: E402

pytestmark = pytest.mark.emulator

SK4 = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4)
SK8 = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8)
SK4_32 = DenseGemmConfig(32, 64, 128, 2, 2, 3, 0, 4)


@pytest.mark.parametrize(
    "cfg, m, n, k, layout, dtype, bias",
    [
        (SK8, 1, 1024, 4096, "nt", torch.bfloat16, "vector"),  # decode: 16 tiles x 8 splits, 4 K tiles each
        (SK4, 1, 200, 16 * 128 - 40, "nt", torch.bfloat16, None),  # M = 1, N and K tails
        (SK8, 14, 136, 23 * 128 + 8, "tn", torch.float16, "vector"),  # K tail in the last split
        (SK4_32, 34, 72, 8 * 128 - 8, "nn", torch.bfloat16, "expanded"),  # two M tiles, N tail
        (SK4, 16, 64, 8 * 128, "tt", torch.float16, None),  # whole tiles
    ],
    ids=["decode-1x1024x4096-sk8", "m1-sk4-tails", "sk8-fp16-tn", "sk4-32-nn-expanded-bias", "sk4-tt-whole"],
)
def test_one_launch_split_k_against_float64(cfg, m, n, k, layout, dtype, bias):
    rep = emulate_gemm(cfg, m, n, k, layout, dtype=dtype, pad=8, offset=8, bias=bias, alpha=0.75, beta=-1.5,
                       seed=m + n + k)
    assert rep.ok, rep
    (launch,) = rep.emulation.launches
    assert launch.grid[0] == -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k


def _operands(m, n, k, seed):
    gen = torch.Generator().manual_seed(seed)
    a, _ = stored(m, k, "row", torch.bfloat16, pad=8, offset=8)
    b, _ = stored(k, n, "col", torch.bfloat16, pad=8, offset=8)
    a.copy_(torch.randn(m, k, generator=gen))
    b.copy_(torch.randn(k, n, generator=gen))
    bias = torch.randn(n, generator=gen).bfloat16()
    return a, b, bias


def _run(cfg, a, b, bias, workgroups=None):
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.bfloat16)
    jit_fn, args = compile_args(cfg, a, b, out, bias, alpha=1.25, beta=0.5)
    ws = args[4]
    rep = emulate(jit_fn, args, workgroups=workgroups)
    assert rep.ok, rep
    return out, ws


def test_the_same_bits_whichever_workgroup_arrives_last():
    cfg, m, n, k = SK8, 3, 136, 8 * 2 * 128
    a, b, bias = _operands(m, n, k, 1)
    grid = -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k
    ids = list(range(grid))
    rng = random.Random(7)
    orders = [None, ids[::-1], rng.sample(ids, grid), rng.sample(ids, grid)]
    outs = [_run(cfg, a, b, bias, None if o is None else [(x, 0, 0) for x in o])[0] for o in orders]
    for o in outs[1:]:
        assert torch.equal(o.view(torch.int16), outs[0].view(torch.int16))
    ref = reference(a, b, bias, 1.25, 0.5)
    assert (outs[0].double() - ref).abs().max() <= 2 * 2**-8 * ref.abs().max()


def test_counters_are_zero_after_every_launch_and_the_workspace_is_reused():
    cfg, m, n, k = SK4, 5, 72, 1000
    first = None
    for seed in (2, 3):
        a, b, bias = _operands(m, n, k, seed)
        assert config_fits(cfg, checked_problem(a, b, torch.empty(m, n, dtype=torch.bfloat16))) is None
        out, ws = _run(cfg, a, b, bias)
        counters = ws[:SPLIT_K_COUNTERS].view(torch.int32)
        assert not counters.any(), counters.nonzero()
        # One workspace per (device, stream), zeroed when made: the second call reuses it.
        first = ws.data_ptr() if first is None else first
        assert ws.data_ptr() == first
        ref = reference(a, b, bias, 1.25, 0.5)
        assert (out.double() - ref).abs().max() <= 2 * 2**-8 * ref.abs().max()


def test_a_workspace_with_a_stale_count_is_the_launchers_invariant_not_the_kernels():
    # The kernel trusts the counters to be zero at launch: with one left at 1 the tile's
    # reducer is the second-to-last arriver, whose read of the last split's partial races.
    cfg, m, n, k = SK4, 2, 64, 1024
    a, b, bias = _operands(m, n, k, 4)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    jit_fn, args = compile_args(cfg, a, b, out, bias)
    args[4][:SPLIT_K_COUNTERS].view(torch.int32)[0] = 1
    try:
        rep = emulate(jit_fn, args)
        assert any(f.kind == "global_race" for f in rep.findings), rep
    finally:
        args[4][:SPLIT_K_COUNTERS].zero_()


def _planted(monkeypatch, request, *, release: bool, acquire: bool):
    """The kernel built afresh with its handoff weakened: the counter atomic relaxed to
    release-only or monotonic ordering, and the fences of the dropped kind removed."""
    from flydsl.expr.enum import AtomicOrdering

    from torch_flydsl.templates.dense_gemm import kernel

    real_fence, real_add = kernel.memory_fence, kernel.atomic_add
    dropped = set()
    if not release:
        dropped.add(AtomicOrdering.Release)
    if not acquire:
        dropped.add(AtomicOrdering.Acquire)
    order = {(True, False): AtomicOrdering.Release, (False, True): AtomicOrdering.Acquire}.get(
        (release, acquire), AtomicOrdering.Monotonic)

    def fence(*, syncscope=None, ordering=AtomicOrdering.SeqCst):
        if ordering not in dropped:
            real_fence(syncscope=syncscope, ordering=ordering)

    monkeypatch.setattr(kernel, "memory_fence", fence)
    monkeypatch.setattr(kernel, "atomic_add", lambda ptr, v, syncscope=None, ordering=None:
                        real_add(ptr, v, syncscope=syncscope, ordering=order))
    # Build afresh, bypassing the builder's cache and its recipe (a compile worker would
    # rebuild the real kernel: a planted bug lives in this process only).
    monkeypatch.setattr(kernel, "build", kernel.build.__wrapped__)
    launcher._kernel.cache_clear()
    request.addfinalizer(launcher._kernel.cache_clear)


@pytest.mark.parametrize("release, acquire", [(False, True), (True, False), (False, False)],
                         ids=["no-release", "no-acquire", "neither"])
def test_a_handoff_without_its_release_or_acquire_is_a_global_race(monkeypatch, request, release, acquire):
    _planted(monkeypatch, request, release=release, acquire=acquire)
    cfg, m, n, k = SK4, 3, 64, 1024
    a, b, bias = _operands(m, n, k, 5)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    jit_fn, args = compile_args(cfg, a, b, out, bias)
    rep = emulate(jit_fn, args)
    races = [f for f in rep.findings if f.kind == "global_race"]
    assert races, rep
    assert not rep.ok
    # The numbers still come out right (the emulator's memory is sequentially consistent):
    # only the checker tells the missing fence.
    ref = reference(a, b, bias, 1.0, 1.0)
    assert (out.double() - ref).abs().max() <= 2 * 2**-8 * ref.abs().max()
