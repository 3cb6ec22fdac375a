"""The software pipeline (``main_loop``): all K tiles of one output tile through ``stages`` LDS
buffers, ``stages - 1`` tiles in flight ahead of compute, tracked with ``s_waitcnt vmcnt``
(every thread issues the same number of DMAs per tile, so "at most (stages-2) tiles
outstanding" means "this tile landed"). One barrier per K tile.
"""

from typing import Protocol

from flydsl.expr import const_expr, gpu, range_constexpr, rocdl

from ..dsl import dsl_control_flow
from .tile_spec import TileConfig


class PipelineSpec(Protocol):
    """What the pipeline reads of a family's kernel spec (a ``TileSpec`` or the scaled one)."""

    @property
    def cfg(self) -> TileConfig: ...  # ``stages``
    @property
    def loads_per_tile(self) -> int: ...  # async DMAs per thread per K tile, for the vmcnt waits


def main_loop(spec: PipelineSpec, loads, mma, k_tiles, kt0=None):
    """All K tiles through ``stages`` LDS buffers: ``stages - 1`` tiles in flight ahead of the
    MFMAs, one barrier per tile. Returns with every DMA retired.

    ``k_tiles`` tiles starting at tile ``kt0`` (None: 0; split-K starts later). ``loads`` and
    ``mma`` are the family's: ``loads.load_stage(kt, stage)`` issues the DMAs of K tile ``kt``
    into LDS stage ``stage``, ``mma.compute_stage(stage, issue)`` accumulates one stage and calls
    ``issue()`` (the next tile's DMAs) at the point of its instruction stream where the DMAs
    should go (the dense MMA: after its LDS reads, so the DMAs can sit between its MFMAs).

    The loop is peeled so that its steady state is one basic block with no branch but the back
    edge: the prologue fetches tiles ``0 .. S-2``; each steady iteration waits for its tile with
    ``(S-2)`` tiles still in flight (never ``vmcnt(0)`` when ``S >= 3``), fetches tile
    ``kt + S - 1`` and computes tile ``kt``; the drain computes the last ``min(S-1, k_tiles)``
    tiles, waiting for one fewer tile in flight each time. The wait counts are the same when
    ``k_tiles < S - 1``: after tile ``kt`` exactly ``k_tiles - 1 - kt`` younger tiles were
    issued.
    """
    _main_loop(spec, loads.load_stage, mma.compute_stage, k_tiles, kt0)


@dsl_control_flow
def _main_loop(spec: PipelineSpec, load_stage, compute_stage, k_tiles, kt0):
    # Plain functions: the control-flow rewriter would carry an object whose method is called
    # in a loop or branch as loop/branch state.
    S = spec.cfg.stages
    per_tile = spec.loads_per_tile

    def tile(kt):
        return kt if const_expr(kt0 is None) else kt0 + kt

    # Prologue: tiles 0..S-2 into stages 0..S-2, those that exist. Tile 0 is fetched even when
    # there is none (a grouped GEMM's empty K group): its DMAs read zeros, never used.
    for s in range_constexpr(S - 1):
        if const_expr(s == 0):
            load_stage(tile(0), 0)
        else:
            if s < k_tiles:
                load_stage(tile(s), s)
    # Steady state: in iteration kt the DMA for tile kt+S-1 goes into stage (kt+S-1) % S, which
    # held tile kt-1 and is free after the barrier.
    for kt in range(k_tiles - (S - 1)):
        # Tile kt has landed once at most the S-2 younger tiles' DMAs remain outstanding (every
        # thread issues the same number of DMAs per tile).
        rocdl.s_waitcnt(vmcnt=(S - 2) * per_tile)
        # Everyone's DMA for tile kt is visible, and everyone finished reading tile kt-1's stage.
        gpu.barrier()
        nxt = kt + (S - 1)
        compute_stage(kt % S, lambda: load_stage(tile(nxt), nxt % S))
    # Drain: the last min(S-1, k_tiles) tiles, nothing more to fetch.
    for j in range_constexpr(S - 1):
        kt = k_tiles - (S - 1) + j
        if kt >= 0:
            rocdl.s_waitcnt(vmcnt=(S - 2 - j) * per_tile)
            gpu.barrier()
            compute_stage(kt % S, None)
    rocdl.s_waitcnt(vmcnt=0)
