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


@pytest.mark.parametrize("m, k, fmt", [(16, 128, "Float8E4M3FN"), (16, 128, "Float4E2M1FN"), (32, 64, "Float8E4M3FN")])
def test_scaled_mfma_lane_layouts_match_flydsl_atoms(m, k, fmt):
    import flydsl.expr as fx
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    with _create_mlir_context(), ir.Location.unknown():
        mod = ir.Module.create()
        with ir.InsertionPoint(mod.body):
            atom = fx.make_mma_atom(fx.rocdl.cdna4.MFMA_Scale(m, m, k, getattr(fx, fmt)))
            tabs = {}
            for name in ("A", "B", "C"):
                L = getattr(atom, f"layout_{name}_tv")
                nvals = fx.get_scalar(fx.size(L)) // 64
                tabs[name] = np.array(
                    [[fx.get_scalar(fx.crd2idx(fx.make_coord(t, v), L)) for v in range(nvals)] for t in range(64)]
                )
    (a_row, a_k), (b_k, b_col), (c_row, c_col) = mfma_layout(m, m, k)
    assert np.array_equal(tabs["A"], a_row + m * a_k)
    assert np.array_equal(tabs["B"], b_col + m * b_k)
    assert np.array_equal(tabs["C"], c_row + m * c_col)
