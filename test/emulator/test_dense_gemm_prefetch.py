"""The register-prefetch pipeline (``gemm.prefetch_loop``) of the big-tile configs, in the
emulator against float64, swept over what its schedule special-cases: K tile counts below,
at and above the stage count, odd and even (the loop's unrolled pairs and its odd last tile;
re-fetches past the last tile), K tails, every layout, fp16, bias, several workgroups with the
group-M block order, padded leading strides and storage offsets; the race checker must stay
silent. The default tier runs one case per curated prefetch config (``test_dense_gemm_emulated``
and ``test_grouped_gemm_emulated``'s curated cases); this sweep is ``slow`` (minutes).

    pytest -m slow test/emulator/test_dense_gemm_prefetch.py
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig, search_space  # noqa: E402

from dense_cases import emulate_gemm  # noqa: E402

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PREFETCH = [c for c in search_space("curated") if c.prefetch]
# The same pipeline on a small tile (cheap to emulate: many K tiles, several workgroups).
SMALL = DenseGemmConfig(64, 64, 32, 2, 2, 3, 0, prefetch=1)


def test_the_curated_list_offers_a_prefetch_config():
    assert PREFETCH and all(c.stages >= 3 and c.split_k == 1 for c in PREFETCH)


@pytest.mark.parametrize("k_tiles", [1, 2, 3, 4, 5, 8, 11])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_small_tile_k_tile_counts_and_layouts(k_tiles, layout):
    # Three output tiles down M (the last a tail), two across N (a tail), a K tail of 8.
    rep = emulate_gemm(SMALL, 2 * 64 + 40, 64 + 24, k_tiles * 32 - 8, layout, pad=8, offset=8, seed=k_tiles,
                       dtype=torch.float16 if k_tiles % 2 else torch.bfloat16)
    assert rep.ok, rep


@pytest.mark.parametrize("cfg", PREFETCH, ids=lambda c: c.key())
@pytest.mark.parametrize("k_tiles, layout, bias", [(1, "tt", "vector"), (4, "nn", None), (10, "nt", "vector"),
                                                    (9, "tn", None)])
def test_big_tile(cfg, k_tiles, layout, bias):
    # Two output tiles down M (group-M order), N tail, K tail, bias with alpha/beta.
    rep = emulate_gemm(cfg, cfg.block_m + 72, cfg.block_n - 40, k_tiles * cfg.block_k - 16, layout, pad=8, offset=8,
                       bias=bias, alpha=0.5, beta=2.0, seed=k_tiles)
    assert rep.ok, rep
