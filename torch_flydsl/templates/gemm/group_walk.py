"""Persistent workgroups over (group, tile) pairs: the walk that finds each tile's group.

Output tiles are numbered group by group (``persistent`` bounds their count and sizes the
grid); workgroup ``w`` takes tiles ``w, w + grid, ...`` in increasing order and walks the
offsets forward as it goes (``advance``: one scalar offset load per group it passes, never a
rescan), so the walk costs each workgroup at most G steps in all. Empty groups own no tile and
cost one step of that walk; numbers past the real tile count end the loop.
"""

import flydsl.expr as fx
from flydsl.expr import rocdl

from ..dsl import dsl_control_flow

OFFS_BYTES = 4  # int32 offsets
NO_MORE_TILES = 1 << 30  # the tile count of the "group" past the last one: the walk stops there


def group_end(offs_buf, g, prev, groups, tokens, group_rows):
    """Group ``g``'s end row, clamped as the reference clamps it (at or after ``prev``, at or
    before ``tokens``). Ragged (``offs_buf``): ``g`` past the last group reads the last offset
    (never out of range). Batched (``offs_buf`` is None): ``(g + 1) * group_rows``."""
    if offs_buf is None:
        e = (g + 1) * group_rows
    else:
        # Every lane loads the same offset: say so (a scalar register), so that loop bounds and
        # branches built from it are wave-uniform (a K loop with a barrier needs that).
        e = fx.Int32(rocdl.readfirstlane(fx.Int32.ir_type, offs_buf[(g < groups).select(g, groups - 1)]))
    e = (e < tokens).select(e, tokens)
    return (e < prev).select(prev, e)


def group_tiles(g, start, end, groups, n_tiles, block_m: int):
    return (g < groups).select((end - start + block_m - 1) // block_m * n_tiles, fx.Int32(NO_MORE_TILES))


@dsl_control_flow
def advance(offs_buf, t, g, seen, start, end, tiles, groups, tokens, group_rows, n_tiles, block_m: int):
    """Walk forward from group ``g`` (whose tiles are numbered ``seen ..``) to the group that
    holds tile ``t``; returns the walk state there. ``g == groups`` when ``t`` is past them all."""
    while t >= seen + tiles:
        seen = seen + tiles
        start = end
        g = g + 1
        end = group_end(offs_buf, g, start, groups, tokens, group_rows)
        tiles = group_tiles(g, start, end, groups, n_tiles, block_m)
    return g, seen, start, end, tiles


@dsl_control_flow
def advance_k(offs_buf, t, g, k_start, k_end, groups, k_total, per_group: int):
    """Along K: walk from group ``g`` (K rows ``k_start .. k_end``) to the group of tile ``t``
    (every group has ``per_group`` output tiles); ends clamped as the reference clamps them."""
    while t >= (g + 1) * per_group:
        g = g + 1
        k_start = k_end
        k_end = group_end(offs_buf, g, k_start, groups, k_total, 0)
    return g, k_start, k_end
