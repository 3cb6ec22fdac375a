"""The dense GEMM kernel family, compiled for gfx950 and executed in the emulator.

Covers full tiles, M/N tails, padded leading strides, non-zero storage offsets, every layout
(nn/nt/tn/tt), bias with alpha/beta, fp16, and several tile configs, each against the family's
float64 reference on fresh random inputs, within the accuracy contract of ``dense_cases``
(at most 2x PyTorch's own error on the same problem, plus a tiny floor).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.dense_gemm.config import BASELINE, DEEP_STAGES, search_space  # noqa: E402

from dense_cases import emulate_gemm  # noqa: E402

pytestmark = pytest.mark.emulator


LAYOUTS = ["nn", "nt", "tn", "tt"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_full_tiles(layout):
    rep = emulate_gemm(BASELINE, 128, 128, 128, layout)
    assert rep.ok, rep


@pytest.mark.parametrize("layout", LAYOUTS)
def test_m_and_n_tails(layout):
    rep = emulate_gemm(BASELINE, 200, 136, 128, layout)
    assert rep.ok, rep


@pytest.mark.parametrize("layout", LAYOUTS)
def test_padded_leading_strides_and_storage_offsets(layout):
    rep = emulate_gemm(BASELINE, 96, 80, 128, layout, pad=24, offset=8)
    assert rep.ok, rep  # the harness also checks that the output's padding was left alone


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_vectors_running_past_the_last_element_read_nothing_outside_the_operand(dtype):
    # Column-major A with M % 8 != 0 and row-major B with N % 8 != 0 (leading strides padded to
    # 16 bytes): the DMA vector holding a column's (row's) last elements runs past M (N). In the
    # last column (row) that is past the operand's last byte, and the storages here end right
    # there: the buffer unit must zero-fill those dwords, never read them (issue 6, defect 1).
    # M and N are even, so each operand's span is whole dwords (odd ones are declined).
    rep = emulate_gemm(BASELINE, 98, 100, 128, "tn", dtype=dtype, tight=True)
    assert rep.ok, rep


def test_bias_alpha_beta():
    rep = emulate_gemm(BASELINE, 130, 100, 128, "nt", bias="vector", alpha=0.5, beta=2.0)
    assert rep.ok, rep


def test_fp16():
    rep = emulate_gemm(BASELINE, 72, 136, 128, "tn", dtype=torch.float16)
    assert rep.ok, rep


CURATED = search_space("curated")


@pytest.mark.parametrize("i", range(len(CURATED)), ids=[c.key() for c in CURATED])
def test_every_curated_config(i):
    # Every shipped config: M and N tails, a K tail (K 24 short of whole tiles), three K tiles
    # (the pipeline wraps its stages; split-K: two per split), padded leading strides and a
    # storage offset, layouts and dtypes rotating.
    # The register-prefetch configs (big tiles, costly to emulate): one output tile with M and N
    # tails, and stages + 1 K tiles (its loop's unrolled pairs, the odd last tile when stages is
    # even, the re-fetches past the last tile); test_dense_gemm_prefetch.py sweeps more.
    # The deep configs (stages >= DEEP_STAGES): stages + 1 K tiles, so that their ring wraps.
    cfg = CURATED[i]
    k_tiles = 3 if cfg.split_k == 1 else cfg.split_k * (cfg.stages - 1)
    if cfg.stages >= DEEP_STAGES:
        k_tiles = cfg.stages + 1
    m, n = 2 * cfg.block_m - 8, cfg.block_n + 24
    if cfg.prefetch:
        k_tiles, m, n = cfg.stages + 1, cfg.block_m - 8, cfg.block_n - 24
    k = k_tiles * cfg.block_k - 24
    rep = emulate_gemm(cfg, m, n, k, layout=LAYOUTS[i % 4], dtype=(torch.bfloat16, torch.float16)[i % 2],
                   pad=8, offset=8, bias="vector" if i % 3 == 0 else None, alpha=0.75, beta=-1.5, seed=i)
    assert rep.ok, rep


DEEP = [c for c in CURATED if c.stages >= DEEP_STAGES]


@pytest.mark.parametrize("cfg", DEEP, ids=[c.key() for c in DEEP])
def test_deep_configs_with_fewer_k_tiles_than_stages(cfg):
    # K shorter than the tiles a deep config keeps in flight (two K tiles, the second a tail):
    # the prologue must not wait for DMAs it never issued, nor multiply stages it never filled.
    rep = emulate_gemm(cfg, cfg.block_m + 8, cfg.block_n + 8, 2 * cfg.block_k - 40, layout="nt", seed=7)
    assert rep.ok, rep
