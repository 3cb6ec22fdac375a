"""The RMSNorm kernel, compiled for gfx950 and run in the emulator, agrees with the float64
reference: row lengths that are and are not multiples of the 16-byte vector (the scalar head and
tail, rows starting at every alignment), one to many rows (several rows per workgroup, the
grid-stride loop over rows), with and without weight, eps 0 and 1e-6, NaN/Inf rows as PyTorch
propagates them, and no checker finding (races, out-of-bounds, uninitialized LDS: ``run_emulated``
raises on any)."""

import itertools

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.rmsnorm import baseline_for, check_tensors, reference  # noqa: E402
from torch_flydsl.templates.rmsnorm.config import RmsNormConfig  # noqa: E402
from torch_flydsl.templates.rmsnorm.launcher import outputs_for, run_emulated  # noqa: E402

pytestmark = pytest.mark.emulator

# One rounding of an fp32 value to the output dtype, plus fp32 rstd error (a few ulps).
ULP = {torch.bfloat16: 2**-8, torch.float16: 2**-11, torch.float32: 2**-22}


def inputs(rows, n, dtype, weight, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, n, generator=g) * 3).to(dtype)
    w = (torch.randn(n, generator=g)).to(dtype) if weight else None
    return x, w


def run(x, w, eps, cfg=None, workgroups=None):
    problem = check_tensors(x, (x.shape[-1],), w, eps)
    cfg = cfg or baseline_for(problem)
    y, rstd = outputs_for(x)
    run_emulated(cfg, x, w, y, rstd, eps, problem=problem, workgroups=workgroups)
    return y, rstd


def assert_matches_reference(x, w, eps, y, rstd):
    ry, rr = reference(x, w, eps)
    dt = x.dtype
    assert y.dtype == dt and y.shape == x.shape and rstd.dtype == torch.float32 and rstd.shape == (*x.shape[:-1], 1)
    assert torch.equal(torch.isnan(y), torch.isnan(ry)), "NaN positions differ from the reference"
    fin = torch.isfinite(ry)
    # Relative to each element's magnitude, with an absolute floor for values near zero.
    err = ((y.double() - ry).abs() / (ry.abs() + 1e-2))[fin]
    assert err.numel() == 0 or err.max().item() <= 2 * ULP[dt], err.max().item()
    assert torch.equal(torch.isinf(y), torch.isinf(ry))
    rfin = torch.isfinite(rr)
    assert ((rstd.double() - rr).abs() <= 2**-20 * rr.abs())[rfin].all()
    assert torch.equal(torch.isnan(rstd), torch.isnan(rr)) and torch.equal(torch.isinf(rstd), torch.isinf(rr))


# Default tier: every row-length class once, dtypes and weight/eps alternating.
CASES = [
    (1, 1, torch.float32, True, 1e-6),
    (3, 7, torch.float16, False, 0.0),
    (3, 64, torch.bfloat16, True, 1e-6),
    (1024, 64, torch.bfloat16, False, 1e-6),  # 4 rows per workgroup, 256 workgroups
    (3, 4096, torch.bfloat16, True, 0.0),
    (8, 4097, torch.bfloat16, True, 1e-6),  # every row starts at a different 16-byte alignment
    (3, 4097, torch.float32, False, 1e-6),
    (3, 8191, torch.float16, True, 1e-6),
    (1, 16384, torch.bfloat16, True, None),  # eps=None: fp32's epsilon
]


@pytest.mark.parametrize("rows, n, dtype, weight, eps", CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_kernel_matches_float64_reference(rows, n, dtype, weight, eps):
    x, w = inputs(rows, n, dtype, weight)
    y, rstd = run(x, w, eps)
    assert_matches_reference(x, w, eps, y, rstd)


def test_rows_beyond_the_grid_loop_over_workgroups():
    # 2 workgroups of 4 rows each for 21 rows: every workgroup runs its loop 2-3 times, and
    # the LDS partials of a multi-wave row alternate buffers row by row.
    for cfg in (RmsNormConfig(1, 4, 1), RmsNormConfig(4, 1, 1)):
        x, w = inputs(21, 300, torch.bfloat16, True)
        y, rstd = run(x, w, 1e-6, cfg=cfg, workgroups=2)
        assert_matches_reference(x, w, 1e-6, y, rstd)


def test_nan_and_inf_rows_propagate_like_pytorch():
    x, w = inputs(6, 4097, torch.bfloat16, True)
    x[1, 5] = float("nan")
    x[2, 4096] = float("inf")  # in the scalar tail
    x[3, 0] = float("-inf")  # in the scalar head (row 3 starts 3 * 4097 elements in: unaligned)
    x[4] = 0.0  # eps 0: 0 * rsqrt(0) = NaN, as PyTorch computes it
    y, rstd = run(x, w, 0.0)
    assert_matches_reference(x, w, 0.0, y, rstd)
    torch_y = torch.ops.aten._fused_rms_norm.default(x, [4097], w, 0.0)[0]
    assert torch.equal(torch.isnan(y), torch.isnan(torch_y))
    assert torch.isnan(y[1]).all() and torch.isnan(y[4]).all() and not torch.isnan(y[5]).any()
    assert torch.isnan(y[2, 4096]) and (y[2, :4096] == 0).all()  # Inf -> rstd 0: Inf * 0 = NaN


def test_large_values_overflow_in_fp32_like_pytorch():
    # bf16 holds 1e30; its square overflows fp32 in PyTorch's math as in the kernel's.
    x, w = inputs(2, 64, torch.bfloat16, False)
    x[0, 3] = 1e30
    y, _ = run(x, w, 1e-6)
    torch_y = torch.ops.aten._fused_rms_norm.default(x, [64], None, 1e-6)[0]
    assert torch.equal(torch.isnan(y), torch.isnan(torch_y)) and torch.equal(y[1], torch_y[1])


def test_three_d_input_folds_leading_dims_into_rows():
    x, w = inputs(6, 100, torch.float16, True)
    x3 = x.view(2, 3, 100)
    y, rstd = run(x3, w, 1e-6)
    assert_matches_reference(x3, w, 1e-6, y, rstd)


@pytest.mark.slow
@pytest.mark.parametrize(
    "n, rows, weight, eps",
    list(itertools.product((1, 7, 64, 4096, 4097, 8191, 16384), (1, 3, 1024), (False, True), (0.0, 1e-6))),
)
def test_sweep_matches_float64_reference(n, rows, weight, eps):
    dtype = (torch.bfloat16, torch.float16, torch.float32)[(n + rows) % 3]
    rows = min(rows, 64) if n >= 4096 else rows  # emulation time: a few big rows say as much
    x, w = inputs(rows, n, dtype, weight, seed=n + rows)
    y, rstd = run(x, w, eps)
    assert_matches_reference(x, w, eps, y, rstd)
