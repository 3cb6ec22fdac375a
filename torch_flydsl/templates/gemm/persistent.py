"""The launch side of a persistent grouped GEMM: how many output tiles any split of the rows
into groups can need, and how many workgroups to launch for them.

Output tiles are numbered group by group (a group's M tiles x the N tiles, row-major);
``tile_upper_bound = (ceil(T / block_m) + G) * ceil(N / block_n)`` bounds their count for any
split of T rows into G groups (each group adds at most one partial M tile), so the launch
depends only on shapes, never on the offsets: no host sync, and it can be captured in a CUDA
graph. The grid is ``min(that bound, the workgroups the GPU holds at once)``
(``persistent_grid``); how the workgroups walk the tiles is ``group_walk``'s.

Cheap to import: no FlyDSL. ``tile_upper_bound`` is plain arithmetic, traced into the kernels
as well (on their int32 arguments).
"""

from __future__ import annotations

from typing import Optional

from .limits import LDS_LIMIT_BYTES, NUM_CUS

MAX_RESIDENT = 4  # workgroups per CU the persistent grid plans for (LDS allowing)


def tile_upper_bound(tokens, groups, n, block_m: int, block_n: int):
    """Output tiles any split of ``tokens`` rows into ``groups`` groups can need."""
    return ((tokens + block_m - 1) // block_m + groups) * ((n + block_n - 1) // block_n)


def resident_for_lds(lds_bytes: int) -> int:
    """Workgroups with ``lds_bytes`` of static LDS one CU holds at once, as far as LDS decides
    (at most ``MAX_RESIDENT``)."""
    return max(1, min(MAX_RESIDENT, LDS_LIMIT_BYTES // lds_bytes))


def persistent_grid(tile_bound: int, lds_bytes: int, workgroups: Optional[int] = None) -> int:
    """Workgroups of a persistent launch: what the GPU holds at once, or fewer when the tiles
    are fewer; ``workgroups`` overrides (tests use it to give every workgroup several tiles)."""
    if workgroups is not None:
        return max(1, workgroups)
    return max(1, min(tile_bound, NUM_CUS * resident_for_lds(lds_bytes)))
