"""LDS tiles: the A/B stage buffers and the epilogue's C tile (``shared_tiles``), and the
XOR-swizzled layouts the A/B tiles are staged in (``lds_layout``).

An operand whose K dimension is contiguous in memory (row-major A, column-major B) sits in LDS
K-contiguous and is read with 16-byte ``ds_read_b128``; an operand contiguous along M/N sits
in LDS M/N-contiguous and is read with gfx950's transposing ``ds_read_b64_tr_b16``.
"""

import flydsl.expr as fx

from .geometry import c_lds_row_stride
from .tile_spec import TileSpec


def swizzle_for(rows_contig: bool, rows: int, block_k: int):
    """(B, M, S) of the XOR swizzle applied to an LDS tile, or None.

    K-contiguous tiles: XOR the 16-byte chunk index (bits 3..5 of the element offset) with the
    next three offset bits, so the 8 rows a ds_read_b128 wavefront phase touches hit distinct
    banks. M/N-contiguous tiles read with ds_read_b64_tr_b16 keep 16-element groups intact
    and XOR K bits into bits 4..6.
    """
    if not rows_contig:
        return (3, 3, 3)
    if rows in (64, 128, 256):
        return (2, 4, {64: 2, 128: 3, 256: 4}[rows])
    return None


def lds_layout(rows: int, block_k: int, k_contig: bool):
    """(rows, block_k) LDS tile layout: K-contiguous or rows-contiguous, XOR-swizzled."""
    base = fx.make_ordered_layout((rows, block_k), (1, 0) if k_contig else (0, 1))
    sw = swizzle_for(not k_contig, rows, block_k)
    if sw is None:
        return base
    return fx.make_composed_layout(fx.static(fx.SwizzleType.get(*sw)), base)


def shared_tiles(spec: TileSpec, elem):
    """LDS pointers ``(a, b, c)``: ``stages`` A and B tile buffers, and the epilogue's padded
    C tile, which reuses the A/B stage buffers once the main loop is done."""
    cfg = spec.cfg
    S, BM, BN, BK = cfg.stages, cfg.block_m, cfg.block_n, cfg.block_k

    @fx.struct
    class SharedAB:
        a: fx.Array[elem, S * BM * BK, 16]
        b: fx.Array[elem, S * BN * BK, 16]

    @fx.union
    class Shared:
        ab: SharedAB
        c: fx.Array[elem, BM * c_lds_row_stride(BN), 16]

    storage = fx.SharedAllocator().allocate(Shared)
    return storage.ab.a.peek().ptr, storage.ab.b.peek().ptr, storage.c.peek().ptr
