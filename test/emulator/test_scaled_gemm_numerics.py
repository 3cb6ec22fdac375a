"""MX scaled GEMM numerics in the emulator beyond the family matrix: extreme E8M0 scales
(2^-127 and 2^127), NaN/Inf data and NaN (0xFF) scales, and a planted kernel that follows
FlyDSL 0.5.0's MFMA_Scale atom (FP8 as 32 consecutive K per lane) instead of the hardware
order, which only scales that vary per 32-block along K can tell apart.
"""

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import emulate  # noqa: E402
from torch_flydsl.emulator.harness import StorageWatch  # noqa: E402
from torch_flydsl.templates.scaled_gemm import ScaledGemmConfig, compile_args, reference  # noqa: E402
from torch_flydsl.templates.scaled_gemm.reference import fp32_accumulated  # noqa: E402

from dense_cases import stored  # noqa: E402
from test_scaled_gemm_emulated import FACTOR, FLOOR, SMALL, emulate_scaled, mx_matrix, scale_matrix  # noqa: E402

pytestmark = pytest.mark.emulator


def complementary_extremes(sa, sb):
    """Per 32-block, A's scales near one end of E8M0 and B's near the other (2^-127 .. 2^-124
    against 2^124 .. 2^127, either way round, and some blocks where both are 2^-127-ish, whose
    terms vanish in fp32), so every scale extreme occurs while each block's scale product
    stays at 2^-3 .. 2^3 or underflows."""
    g = torch.Generator().manual_seed(11)
    blocks = sa.shape[1]
    base = torch.tensor([0, 251, 127, 0, 251, 3, 248, 0])[torch.arange(blocks) % 8]
    both_low = torch.arange(blocks) % 8 == 7
    sa[:] = (base[None, :] + torch.randint(0, 4, sa.shape, generator=g)).to(torch.uint8)
    other = torch.where(both_low, torch.zeros_like(base), 251 - base)
    sb[:] = (other[None, :] + torch.randint(0, 4, sb.shape, generator=g)).to(torch.uint8)
    assert int(sa.min()) == 0 and int(sa.max()) == 254 and int(sb.min()) == 0 and int(sb.max()) == 254


@pytest.mark.parametrize("formats", [("e4m3", "e4m3"), ("e2m1", "e4m3")], ids="x".join)
def test_extreme_scales_2_pow_minus_127_and_2_pow_127(formats):
    rep = emulate_scaled(SMALL, 32, 40, 512, formats, scale_fn=complementary_extremes, seed=12)
    assert rep.ok, rep


def test_extreme_scales_through_chunked_scale_slots():
    # A curated config with 4-tile scale chunks over 6 K tiles (a steady chunk and a short one):
    # codes 0 and 254 sit in every position of a chunk slot.
    cfg = ScaledGemmConfig(32, 32, 128, 1, 2, 3, 0, 4)
    rep = emulate_scaled(cfg, 30, 40, 6 * 128, ("e4m3", "e2m1"), scale_fn=complementary_extremes, seed=15)
    assert rep.ok, rep


def test_extreme_scales_through_the_ping_pong_halves():
    # The ping-pong loop stages each A half's and B's scales apart (A in two slot parts): codes 0
    # and 254 through both parts over 5 K tiles, rows of A past the first half in both tiles.
    cfg = ScaledGemmConfig.from_key("mx_m64n64k128_w2x2_s2_g0_pp")
    rep = emulate_scaled(cfg, 100, 40, 5 * 128, ("e4m3", "e4m3"), scale_fn=complementary_extremes, seed=16)
    assert rep.ok, rep


@pytest.mark.parametrize("cfg, k", [(ScaledGemmConfig(32, 32, 128, 1, 2, 2), 256),
                                    pytest.param(ScaledGemmConfig(32, 32, 128, 1, 2, 3, 0, 4), 5 * 128,
                                                 marks=pytest.mark.slow)], ids=str)
def test_nan_and_inf_in_data_and_nan_scales_propagate_like_the_reference(cfg, k):
    """NaN (e4m3 0x7F) in A, +Inf and -Inf (e5m2) in one column of B, an E8M0 0xFF scale in a
    row of A and in a column of B: every NaN, inf and its sign where the reference has them
    (NaN x anything, inf x 0, inf - inf), finite elements within the accuracy contract, and
    no byte written outside the output (per-tile scales, and a curated 4-tile scale chunk)."""
    g = torch.Generator().manual_seed(13)
    m, n = 24, 40
    a, a_base = mx_matrix(m, k, "e4m3", g, pad=16)
    bt, b_base = mx_matrix(n, k, "e5m2", g, pad=16)
    sa, sa_base = scale_matrix(m, k, g)
    sb, sb_base = scale_matrix(n, k, g)
    out, out_base = stored(m, n, "row", torch.bfloat16, pad=8)
    av, bv = a.view(torch.uint8), bt.view(torch.uint8)
    av[3, 77] = 0x7F  # NaN: row 3 is NaN everywhere
    bv[5, 10] = 0x7C  # +Inf at k=10 of column 5 ...
    bv[5, 200] = 0xFC  # ... and -Inf at k=200: rows where both products are infinite get inf - inf
    av[:, 10] = torch.where(torch.arange(m) % 5 == 0, 0, av[:, 10])  # inf * 0 in some rows
    sa.view(torch.uint8)[7, 2] = 0xFF  # NaN scale: row 7
    sb.view(torch.uint8)[20, 5] = 0xFF  # NaN scale: column 20
    b = bt.t()
    jit_fn, args = compile_args(cfg, a, b, sa, sb, out)
    out_base.view(torch.int16).fill_(0x7FDA)  # NaN with a payload no arithmetic produces
    inputs = [a_base, b_base, sa_base, sb_base]
    logical = torch.zeros(out_base.shape, dtype=torch.bool)
    logical.as_strided(out.shape, out.stride(), out.storage_offset())[:] = True
    watch = StorageWatch(inputs, [out_base], [logical])  # every byte but out[:M, :N] must stay
    rep = emulate(jit_fn, args, tensors=inputs + [out_base])
    assert rep.ok, rep
    assert not watch.stray_changes(), watch.stray_changes()
    expected = reference(a, b, sa, sb).to(torch.bfloat16)
    got = out
    nan = torch.isnan(expected)
    assert nan[3].all() and nan[7].all() and nan[:, 20].all()
    assert torch.isinf(expected[:, 5]).any() and nan[:, 5].sum() > 3  # inf, inf * 0 and inf - inf all occur
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[torch.isinf(expected)], expected[torch.isinf(expected)])
    finite = torch.isfinite(expected)
    ref = reference(a, b, sa, sb)
    base_err = (fp32_accumulated(a, b, sa, sb) - ref)[finite].abs().max()
    err = (got.double() - ref)[finite].abs().max()
    assert err <= FACTOR * base_err + FLOOR * ref[finite].abs().max(), (err, base_err)


def rowwise_scales(sa, sb):
    """Scales that vary per row/column but not along K."""
    sa[:] = sa[:, :1]
    sb[:] = sb[:, :1]


def test_flydsl_atom_k_order_is_caught_only_by_scales_that_vary_along_k(monkeypatch):
    # FlyDSL 0.5.0's MFMA_Scale atom says an FP8 lane holds 32 consecutive K values scaled by
    # its own scale byte. A kernel built on that (lane group g reading logical block g*S + kk
    # whole) still pairs A and B correctly, so with scales constant along K it is right; on
    # the hardware (two runs of 16, scale per instruction K block) varying scales break it.
    from torch_flydsl.templates.scaled_gemm import kernel

    def atom_order(fmt, g, kk, steps):
        start = 32 * (g * steps + kk) if fmt.bits == 8 else 16 * (g * steps + kk)
        return [start, start + 16] if fmt.bits == 8 else [start]

    assert emulate_scaled(SMALL, 32, 32, 256, ("e4m3", "e4m3"), seed=14).ok  # the real kernel
    monkeypatch.setattr(kernel, "operand_chunks", atom_order)
    monkeypatch.setattr(kernel, "build", kernel.build.__wrapped__)  # trace afresh
    assert emulate_scaled(SMALL, 32, 32, 256, ("e4m3", "e4m3"), scale_fn=rowwise_scales, seed=14).ok
    rep = emulate_scaled(SMALL, 32, 32, 256, ("e4m3", "e4m3"), seed=14)
    assert rep.emulation.ok and rep.outputs[0].unwritten == 0
    assert not rep.ok and rep.outputs[0].rel_err > 10 * rep.outputs[0].baseline_rel_err, rep
    # Mixed FP8 x FP4 pairs the wrong K values even with constant scales.
    rep = emulate_scaled(SMALL, 32, 32, 256, ("e4m3", "e2m1"), scale_fn=rowwise_scales, seed=14)
    assert not rep.ok, rep


def test_decode_row_with_bias_on_the_decode_config():
    cfg = ScaledGemmConfig(32, 16, 512, 2, 1, 3)  # the curated decode tile
    rep = emulate_scaled(cfg, 1, 72, 1024, ("e4m3", "e2m1"), bias="vector", seed=15)
    assert rep.ok, rep


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_instruction_to_logical_k_map_is_one_for_both_formats_and_keeps_scale_blocks_whole(steps):
    """The kernel's reads (``operand_chunks``) against the hardware's register layout (the
    emulator's table, itself checked against AMD's sources): at every MFMA step, FP8 and FP4
    operands put the same logical K value at each instruction k (so A and B of any format pair
    agree), and instruction block b is exactly logical block ``b * steps + kk``, which is the
    block whose scale byte lane group b selects with opsel kk (bytes ``b*steps ..`` of its row)."""
    import numpy as np

    from torch_flydsl.emulator.ops.mfma import scaled_mfma_operand_layout
    from torch_flydsl.templates.scaled_gemm.kernel import operand_chunks
    from torch_flydsl.templates.scaled_gemm.problem import FORMATS

    for kk in range(steps):
        maps = []
        for fmt in (FORMATS["e4m3"], FORMATS["e2m1"]):
            _, instr_k = scaled_mfma_operand_layout(16, 128, fmt.bits)
            logical = np.full(128, -1)
            for lane in range(64):
                chunks = operand_chunks(fmt, lane // 16, kk, steps)
                for j in range(32):
                    if fmt.bits == 8:
                        value = chunks[j // 16] + j % 16  # one byte per value
                    else:
                        value = 2 * chunks[0] + j  # 16 bytes, two values per byte, low nibble first
                    assert logical[instr_k[lane, j]] in (-1, value)  # the same for every row
                    logical[instr_k[lane, j]] = value
            maps.append(logical)
        assert np.array_equal(maps[0], maps[1])
        for b in range(4):
            block = maps[0][32 * b: 32 * b + 32]
            # Whole and in order: the scale of logical block b*steps+kk is byte kk of lane group
            # b's scale word (``ScaledMma._read_scales``), which is what opsel kk selects.
            assert np.array_equal(block, (b * steps + kk) * 32 + np.arange(32))
