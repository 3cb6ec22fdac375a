"""The dense GEMM kernel family, compiled for gfx950 and executed in the emulator.

Covers full tiles, M/N tails, padded leading strides, non-zero storage offsets, every layout
(nn/nt/tn/tt), bias with alpha/beta, fp16, and several tile configs, each against the family's
float64 reference on fresh random inputs.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import run_and_compare  # noqa: E402
from torch_flydsl.emulator.capture import ensure_compile_env  # noqa: E402
from torch_flydsl.emulator.checker import ASYNC_READ_BEFORE_WAIT, RACE  # noqa: E402

ensure_compile_env()
from torch_flydsl.templates.dense_gemm.config import BASELINE, DenseGemmConfig  # noqa: E402
from torch_flydsl.templates.dense_gemm.launcher import compile_args  # noqa: E402
from torch_flydsl.templates.dense_gemm.reference import reference  # noqa: E402

pytestmark = pytest.mark.emulator

TOL = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-10}
#: Known kernel issue (reported): the clamped tail DMA of the last K iteration targets the
#: stage being computed, so the checker reports a race / read-before-wait there. Numerics
#: are unaffected (the same tile is reloaded); these tests check numbers, and
#: ``test_dense_gemm_pipeline_is_race_free`` tracks the issue itself.
KNOWN = (RACE, ASYNC_READ_BEFORE_WAIT)


def operand(rows, cols, major, dtype, pad=0, offset=0):
    """A [rows, cols] matrix stored row- or column-major with a padded leading stride and a
    storage offset; returns (view, backing storage tensor)."""
    lead = (cols if major == "row" else rows) + pad
    other = rows if major == "row" else cols
    base = torch.empty(offset + lead * other, dtype=dtype)
    stride = (lead, 1) if major == "row" else (1, lead)
    return base.as_strided((rows, cols), stride, offset), base


def run_gemm(cfg, m, n, k, layout="nn", dtype=torch.bfloat16, pad=0, offset=0, bias=False, alpha=1.0, beta=1.0,
             ignore=KNOWN, seed=0):
    majors = {"n": "row", "t": "col"}
    a, a_base = operand(m, k, majors[layout[0]], dtype, pad, offset)
    b, b_base = operand(k, n, majors[layout[1]], dtype, pad, offset)
    out, out_base = operand(m, n, "row", dtype, pad, offset)
    inputs = [a_base, b_base]
    bias_t = None
    if bias:
        bias_t = torch.empty(n, dtype=dtype)
        inputs.append(bias_t)
    jit_fn, args = compile_args(cfg, a, b, out, bias_t, alpha, beta)

    def ref():
        full = torch.full(out_base.shape, float("nan"), dtype=torch.float64)
        full.as_strided(out.shape, out.stride(), out.storage_offset())[:] = reference(a, b, bias_t, alpha, beta)
        return full

    return run_and_compare(jit_fn, args, ref, inputs=inputs, outputs=[out_base], tolerance=TOL[dtype],
                           ignore_findings=ignore, seed=seed)


LAYOUTS = ["nn", "nt", "tn", "tt"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_full_tiles(layout):
    rep = run_gemm(BASELINE, 128, 128, 128, layout)
    assert rep.ok, rep


@pytest.mark.parametrize("layout", LAYOUTS)
def test_m_and_n_tails(layout):
    rep = run_gemm(BASELINE, 200, 136, 128, layout)
    assert rep.ok, rep


@pytest.mark.parametrize("layout", LAYOUTS)
def test_padded_leading_strides_and_storage_offsets(layout):
    rep = run_gemm(BASELINE, 96, 80, 128, layout, pad=24, offset=8)
    assert rep.ok, rep
    assert rep.outputs[0].unwritten == 0  # and padding of the output was left alone (NaN kept)


def test_bias_alpha_beta():
    rep = run_gemm(BASELINE, 130, 100, 128, "nt", bias=True, alpha=0.5, beta=2.0)
    assert rep.ok, rep


def test_fp16():
    rep = run_gemm(BASELINE, 72, 136, 128, "tn", dtype=torch.float16)
    assert rep.ok, rep


@pytest.mark.parametrize(
    "cfg, shape",
    [
        (DenseGemmConfig(16, 64, 128, 1, 2, 2, 0), (40, 100, 256)),
        (DenseGemmConfig(64, 64, 64, 2, 2, 3, 0), (100, 70, 192)),
        (DenseGemmConfig(128, 128, 64, 2, 2, 3, 8), (300, 260, 128)),
        (DenseGemmConfig(256, 256, 64, 2, 4, 2, 8), (256, 256, 128)),
    ],
    ids=lambda x: x.key() if hasattr(x, "key") else "x".join(map(str, x)),
)
def test_curated_configs(cfg, shape):
    rep = run_gemm(cfg, *shape, layout="nt")
    assert rep.ok, rep


@pytest.mark.xfail(strict=True, reason="dense_gemm kernel: clamped last-iteration DMA writes the stage being computed")
def test_dense_gemm_pipeline_is_race_free():
    rep = run_gemm(BASELINE, 128, 128, 128, "nn", ignore=())
    assert rep.ok, rep
