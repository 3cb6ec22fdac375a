"""The emulator's MFMA register layouts agree with FlyDSL's own MMA atoms.

FlyDSL describes each MFMA atom by thread/value layouts ``(lane, value) -> element`` of the
A (M x K), B (N x K) and C (M x N) tiles, column-major. Evaluated on the host (no GPU, no
jit), they must map every (lane, value) exactly where the emulator's tables put it.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flydsl")

from torch_flydsl.emulator.ops.mfma import mfma_layout  # noqa: E402

pytestmark = pytest.mark.emulator  # needs flydsl (its MMA atoms); tiers select by marker

CASES = [
    (16, 16, 32, "BFloat16"),
    (32, 32, 16, "BFloat16"),
    (16, 16, 32, "Float16"),
    (32, 32, 16, "Float16"),
    (16, 16, 16, "BFloat16"),
    (32, 32, 8, "Float16"),
    (16, 16, 4, "Float32"),
]


def _flydsl_tables(m, n, k, dtype_name):
    import flydsl.expr as fx
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    with _create_mlir_context(), ir.Location.unknown():
        mod = ir.Module.create()
        with ir.InsertionPoint(mod.body):
            try:
                atom = fx.make_mma_atom(fx.rocdl.MFMA(m, n, k, getattr(fx, dtype_name)))
            except Exception as e:  # FlyDSL has no such atom
                pytest.skip(f"FlyDSL cannot build MFMA({m},{n},{k},{dtype_name}): {e}")
            out = {}
            for name in ("A", "B", "C"):
                L = getattr(atom, f"layout_{name}_tv")
                size = fx.get_scalar(fx.size(L))
                nvals = size // 64
                tab = np.zeros((64, nvals), np.int64)
                for t in range(64):
                    for v in range(nvals):
                        tab[t, v] = fx.get_scalar(fx.crd2idx(fx.make_coord(t, v), L))
                out[name] = tab
            return out


@pytest.mark.parametrize("m, n, k, dtype_name", CASES)
def test_mfma_lane_layouts_match_flydsl_atoms(m, n, k, dtype_name):
    fly = _flydsl_tables(m, n, k, dtype_name)
    (a_row, a_k), (b_k, b_col), (c_row, c_col) = mfma_layout(m, n, k)
    assert np.array_equal(fly["A"], a_row + m * a_k), "A operand layout differs"
    assert np.array_equal(fly["B"], b_col + n * b_k), "B operand layout differs"
    assert np.array_equal(fly["C"], c_row + m * c_col), "accumulator layout differs"


def test_transposing_lds_read_matches_flydsl_copy_atom_semantics():
    """ds_read_b64_tr_b16: FlyDSL's LDSReadTrans16_64b atom says lane t, value j receives the
    16-bit element 16*j + t of the 16-lane block formed by the lanes' 64-bit reads in order.
    The emulator's op is checked against that formula on a real bit pattern."""
    import torch
    from irkit import TR16_ROUNDTRIP, run

    data = torch.randint(-30000, 30000, (64 * 4,), dtype=torch.int16)
    out = torch.zeros(64 * 4, dtype=torch.int16)
    body = TR16_ROUNDTRIP
    run("%in: !llvm.ptr<1>, %out: !llvm.ptr<1>", body, [data, out], lds_bytes=512)
    blocks = data.view(4, 64)
    got = out.view(4, 16, 4)
    for g in range(4):
        for t in range(16):
            for j in range(4):
                assert got[g, t, j] == blocks[g, 16 * j + t]


def _scaled_atom_tables(m, k, fmt_a, fmt_b):
    import flydsl.expr as fx
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    with _create_mlir_context(), ir.Location.unknown():
        mod = ir.Module.create()
        with ir.InsertionPoint(mod.body):
            atom = fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(m, m, k, getattr(fx, fmt_a), getattr(fx, fmt_b)))
            tabs = {}
            for name in ("A", "B", "C"):
                L = getattr(atom, f"layout_{name}_tv")
                nvals = fx.get_scalar(fx.size(L)) // 64
                tabs[name] = np.array(
                    [[fx.get_scalar(fx.crd2idx(fx.make_coord(t, v), L)) for v in range(nvals)] for t in range(64)]
                )
    return tabs


_BITS = {"Float8E4M3FN": 8, "Float8E5M2": 8, "Float6E2M3FN": 6, "Float6E3M2FN": 6, "Float4E2M1FN": 4}


@pytest.mark.parametrize("m, k", [(16, 128), (32, 64)])
@pytest.mark.parametrize(
    "fmt_a, fmt_b",
    [
        ("Float8E4M3FN", "Float8E4M3FN"),
        ("Float8E5M2", "Float8E5M2"),
        ("Float4E2M1FN", "Float4E2M1FN"),
        ("Float6E2M3FN", "Float6E2M3FN"),
        ("Float8E4M3FN", "Float4E2M1FN"),
        ("Float6E2M3FN", "Float4E2M1FN"),
    ],
)
def test_scaled_mfma_atoms_vs_hardware_order(m, k, fmt_a, fmt_b):
    """FlyDSL 0.5.0's MFMA_Scale atom vs the hardware order the emulator implements.

    Agree: which lane holds which row of A / column of B (``l % m``), the accumulator layout,
    and for FP4 / FP6 the K order (32 consecutive k per lane group g = l // m).
    Differ: for FP8/BF8 the atom still says ``k = 32 g + j``, the hardware has two runs of 16,
    ``k = (K/2)(j // 16) + 16 g + j % 16`` (AMD ROCm blog CDNA3/4 matrix cores, Triton's scaled
    MFMA lowering; see the emulator README). They coincide only on the positions asserted below;
    if a FlyDSL release fixes the atom this test fails: then drop the difference, keep the check.
    The atom carries no scale layout: the scale of row/col i, K block b is in lane ``m*b + i``.
    """
    from torch_flydsl.emulator.ops.mfma import mfma_layout, scaled_mfma_operand_layout

    tabs = _scaled_atom_tables(m, k, fmt_a, fmt_b)
    (c_row, c_col) = mfma_layout(m, m, k)[2]
    assert np.array_equal(tabs["C"], c_row + m * c_col), "accumulator layout differs"
    lane = np.arange(64)[:, None]
    j = np.arange(32)[None, :]
    g = lane // m
    for name, fmt in (("A", fmt_a), ("B", fmt_b)):
        atom_idx, atom_k = tabs[name] % m, tabs[name] // m  # A: row + m*k; B: col + n*k
        hw_idx, hw_k = scaled_mfma_operand_layout(m, k, _BITS[fmt])
        assert np.array_equal(atom_idx, hw_idx), f"{name}: lane -> row/column differs"
        assert np.array_equal(atom_k, 32 * g + j + 0 * lane), f"{name}: FlyDSL's atom changed its K order"
        if _BITS[fmt] != 8:
            assert np.array_equal(atom_k, hw_k), f"{name} ({fmt}): atom and hardware K order differ"
        else:
            # the runs coincide for g == 0, j < 16 and for the last group's second run only
            last = 64 // m - 1
            same = ((g == 0) & (j < 16)) | ((g == last) & (j >= 16))
            assert np.array_equal(atom_k == hw_k, same), f"{name} ({fmt}): the known FP8 difference changed"
