"""AMD's production gfx950 bf16 GEMM (FlyDSL repo ``kernels/gemm/gemm_a16w16_gfx950.py``, not in
the wheel) through the emulator, when ``FLYDSL_REPO_CHECKOUT`` names a checkout of that repo.

The full-tile kernel must be exact and clean. The half-tile-interleaved (HTI) variant staggers
two wave groups by one barrier; the checker reports that the leading group reads LDS that
the other group's direct-to-LDS loads target before that group's ``s_waitcnt`` (see report).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytest.importorskip("flydsl")
REF = os.environ.get("FLYDSL_REPO_CHECKOUT", "")
if not os.path.isdir(os.path.join(REF, "kernels", "gemm")):
    pytest.skip("set FLYDSL_REPO_CHECKOUT to a FlyDSL repo checkout to run these", allow_module_level=True)

from torch_flydsl.emulator import BaselineTolerance, run_and_compare  # noqa: E402
from torch_flydsl.emulator.checker import ASYNC_READ_BEFORE_WAIT  # noqa: E402

from dense_cases import ATEN_FACTOR, ERROR_FLOOR  # noqa: E402

pytestmark = pytest.mark.emulator


def _gemm(hti: bool, m=256, n=256, k=256):
    # The repo's host code asks FlyDSL for the arch while building its params (outside compile).
    os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx950")
    sys.path.insert(0, REF)
    try:
        from kernels.gemm import gemm_a16w16_gfx950 as G
    finally:
        sys.path.remove(REF)
    a = torch.empty(m, k, dtype=torch.bfloat16)
    bt = torch.empty(n, k, dtype=torch.bfloat16)
    b = bt.t()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    kw = dict(block_m=256, block_n=256, block_k=64, stages=2, split_k=1, m_waves=2, n_waves=4, k_waves=1, group_m=0,
              use_half_tile_interleaved=hti, a_is_transposed=False, b_is_transposed=True,
              in_dtype_id=G.GEMM_A16W16_DTYPE_BF16, out_dtype_id=G.GEMM_A16W16_DTYPE_BF16, has_bias=False)
    param = G.make_gemm_a16w16_param_and_validate(m, n, k, kw)
    sem, sig = torch.zeros(1024, dtype=torch.int32), torch.zeros(1024, dtype=torch.int32)
    aa, bb, oo = G._dynamic_tensor_arg(a, 1), G._dynamic_tensor_arg(b, 0), G._dynamic_tensor_arg(out, 1)
    args = (oo, aa, bb, aa, sem, sig, 1, param, 1)
    return G.gemm_a16w16_gfx950, args, a, bt, out


def aten_contract(a, bt):
    """The dense accuracy contract (see dense_cases): at most 2x torch.mm's own error."""
    return BaselineTolerance(lambda: a @ bt.T, ATEN_FACTOR, ERROR_FLOOR)


def test_full_tile_kernel_matches_reference_and_is_clean():
    fn, args, a, bt, out = _gemm(False)
    rep = run_and_compare(fn, args, lambda: a.double() @ bt.double().T, inputs=[a, bt], outputs=[out],
                          tolerance=aten_contract(a, bt))
    assert rep.ok, rep


def test_hti_kernel_numbers_match_but_async_loads_are_read_before_their_wait():
    fn, args, a, bt, out = _gemm(True)
    rep = run_and_compare(fn, args, lambda: a.double() @ bt.double().T, inputs=[a, bt], outputs=[out],
                          tolerance=aten_contract(a, bt))
    assert {f.kind for f in rep.emulation.errors} == {ASYNC_READ_BEFORE_WAIT}
    assert all(o.rel_err <= o.tolerance and o.unwritten == 0 for o in rep.outputs)
