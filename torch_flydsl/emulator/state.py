"""Execution state: one workgroup (LDS, barrier phase, findings) and its waves (64 lanes each)."""

from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Tuple

import numpy as np

from .checker import Findings, LdsShadow
from .hb import GlobalShadow, WaveClock
from .memory import GlobalMemory

WAVE = 64


class Workgroup:
    def __init__(self, block_id, grid, block, lds_size: int, mem: GlobalMemory, findings: Findings, check: bool,
                 hb: Optional[GlobalShadow] = None):
        self.block_id = tuple(int(b) for b in block_id)
        self.grid = tuple(int(g) for g in grid)
        x, y, z = self.block_id
        self.linear_id = x + self.grid[0] * (y + self.grid[1] * z)
        self.block = tuple(int(b) for b in block)
        self.lds = np.zeros(lds_size, np.uint8)
        self.lds_size = lds_size
        self.mem = mem
        self.findings = findings
        self.check = check
        self.shadow: Optional[LdsShadow] = LdsShadow(lds_size, findings, self.block_id) if check else None
        self.phase = 0
        self.next_async_id = 0
        self.nthreads = self.block[0] * self.block[1] * self.block[2]
        self.nwaves = (self.nthreads + WAVE - 1) // WAVE
        self.hb = hb  # the launch's global happens-before checker (with ``check``)


class Wave:
    """A wave64: the unit of lockstep execution. Values live in ``env`` (one slot per SSA value)."""

    __slots__ = ("env", "mask", "wave_id", "lane", "tid", "wg", "vm_queue", "lanes", "full_mask", "hb")

    def __init__(self, wg: Optional[Workgroup], wave_id: int, num_values: int, lanes: int = WAVE):
        self.env: List = [None] * num_values
        self.wave_id = wave_id
        self.lanes = lanes
        self.lane = np.arange(lanes, dtype=np.int64)
        self.wg = wg
        self.vm_queue: Deque[Tuple[int, Optional[int]]] = deque()  # outstanding vector-memory ops: (async_op_id or -1, lds byte idx)
        if wg is not None:
            linear = wave_id * WAVE + self.lane
            bx, by, _bz = wg.block
            self.tid = (linear % bx, (linear // bx) % by, linear // (bx * by))
            self.full_mask = linear < wg.nthreads
        else:  # host function: a single "lane"
            z = np.zeros(lanes, np.int64)
            self.tid = (z, z, z)
            self.full_mask = np.ones(lanes, np.bool_)
        self.mask = self.full_mask
        self.hb: Optional[WaveClock] = None
        if wg is not None and wg.hb is not None:
            self.hb = wg.hb.wave_clock(wg.linear_id, wave_id)
