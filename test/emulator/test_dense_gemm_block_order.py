"""Which workgroup computes which output tile, observed in the emulator: every output element
remembers the workgroup that wrote it (``emulate(..., track_writers=True)``), so the block
order is read off the kernel itself, not off a Python copy of its arithmetic.

The order is specified here in words and in small literal tables:

* ``group_m == 0``: row-major over the tile grid (block id ``i * tiles_n + j`` -> tile ``(i, j)``).
* ``group_m > 0``: *group-M order* walks bands of ``group_m`` tile rows (the last band may be
  shorter), each band column by column, top to bottom. When the tile count divides by the
  8 XCDs of an MI350 (which receive block ids round-robin: XCD ``x`` runs ids ``x, x + 8, ...``),
  XCD ``x`` takes the ``x``-th run of ``tiles / 8`` consecutive tiles of that order, so that
  neighbouring tiles share one L2; otherwise block id ``q`` takes the ``q``-th tile of it.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import emulate  # noqa: E402
from torch_flydsl.templates.dense_gemm import kernel  # noqa: E402
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig  # noqa: E402
from torch_flydsl.templates.gemm.limits import NUM_XCDS  # noqa: E402
from torch_flydsl.templates.dense_gemm.launcher import compile_args  # noqa: E402

pytestmark = pytest.mark.emulator

TILE = 32  # small tiles, one K tile and a single wave: a workgroup costs milliseconds


def config(group_m):
    return DenseGemmConfig(TILE, TILE, 32, 1, 1, 2, group_m)


def tile_writers(group_m, tiles_m, tiles_n):
    """[tiles_m][tiles_n] block id that wrote each output tile (M and N have tails)."""
    m, n = tiles_m * TILE - 6, tiles_n * TILE - 8
    a = torch.randn(m, 32).bfloat16()
    b = torch.randn(32, n).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    rep = emulate(*compile_args(config(group_m), a, b, out), track_writers=True)
    assert rep.ok, rep
    assert rep.launches[0].grid == (tiles_m * tiles_n, 1, 1)
    who = torch.from_numpy(rep.writers_of(out))
    grid = []
    for i in range(tiles_m):
        row = []
        for j in range(tiles_n):
            ids = who[i * TILE:(i + 1) * TILE, j * TILE:(j + 1) * TILE].unique().tolist()
            assert len(ids) == 1 and ids[0] >= 0, f"tile {(i, j)} written by {ids}"
            row.append(ids[0])
        grid.append(row)
    return grid


def group_m_order(tiles_m, tiles_n, group_m):
    order = []
    for band in range(0, tiles_m, group_m):
        for j in range(tiles_n):
            order += [(i, j) for i in range(band, min(band + group_m, tiles_m))]
    return order


def expected_group_m(tiles_m, tiles_n, group_m):
    order = group_m_order(tiles_m, tiles_n, group_m)
    count = len(order)
    grid = [[None] * tiles_n for _ in range(tiles_m)]
    for q, (i, j) in enumerate(order):
        if count % NUM_XCDS == 0:
            run = count // NUM_XCDS
            q = q % run * NUM_XCDS + q // run  # the (q % run)-th workgroup of XCD q // run
        grid[i][j] = q
    return grid


@pytest.mark.parametrize("tiles", [(3, 5), (4, 4)], ids=["15-tiles", "16-tiles"])
def test_without_group_m_blocks_walk_the_tiles_row_major(tiles):
    tiles_m, tiles_n = tiles
    expected = [[i * tiles_n + j for j in range(tiles_n)] for i in range(tiles_m)]
    assert tile_writers(0, tiles_m, tiles_n) == expected


def test_group_m_order_when_the_tiles_do_not_split_over_the_xcds():
    # 10 x 3 = 30 tiles: one band of 8 rows, then a short band of 2.
    assert tile_writers(8, 10, 3) == [
        [0, 8, 16],
        [1, 9, 17],
        [2, 10, 18],
        [3, 11, 19],
        [4, 12, 20],
        [5, 13, 21],
        [6, 14, 22],
        [7, 15, 23],
        [24, 26, 28],
        [25, 27, 29],
    ]


def test_group_m_spreads_contiguous_runs_over_the_xcds():
    # 4 x 4 = 16 tiles over 8 XCDs: XCD x (ids x and x + 8) takes tiles 2x and 2x + 1 of
    # group-M order (one band: column by column).
    assert tile_writers(8, 4, 4) == [
        [0, 2, 4, 6],
        [8, 10, 12, 14],
        [1, 3, 5, 7],
        [9, 11, 13, 15],
    ]


@pytest.mark.parametrize("tiles", [(10, 3), (4, 4), (12, 2), (9, 5)])
def test_group_m_order_matches_its_specification(tiles):
    assert tile_writers(8, *tiles) == expected_group_m(*tiles, 8)


def test_a_planted_swap_of_pid_m_and_pid_n_is_caught(monkeypatch, request):
    # The kernel traces the module-level block_order: swap its result and build afresh, without
    # the builder's cache (it would hand back the real kernel) or its recipe (a compile worker
    # would rebuild the real kernel: a planted bug lives in this process only).
    from torch_flydsl.templates.dense_gemm import launcher

    real = kernel.block_order
    monkeypatch.setattr(kernel, "block_order", lambda *args: real(*args)[::-1])
    monkeypatch.setattr(kernel, "build", kernel.build.__wrapped__)
    launcher._kernel.cache_clear()
    request.addfinalizer(launcher._kernel.cache_clear)
    with pytest.raises(AssertionError, match="written by"):
        tile_writers(0, 3, 5)  # tiles of the swapped grid fall outside M: some stay unwritten
    assert tile_writers(0, 4, 4) != [[i * 4 + j for j in range(4)] for i in range(4)]
