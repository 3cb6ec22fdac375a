"""Global memory (the CPU tensors passed to the kernel) addressed by their real host addresses.

Pointers in the emulated program are plain int64 addresses, so pointer arithmetic is integer
arithmetic. Each access is resolved against the spans of the tensors handed to the kernel;
anything outside them is out of bounds: reported, loads yield 0 and stores are dropped.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

import numpy as np


@dataclass
class Region:
    start: int
    end: int
    data: np.ndarray  # uint8 view onto the tensor memory (writable)
    name: str
    writer: Optional[np.ndarray] = None  # per byte: linear id of the last workgroup to write it, -1 none


def tensor_span(t) -> Tuple[int, int]:
    """[first byte, last byte + 1) that a strided tensor can address."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    return t.data_ptr(), t.data_ptr() + extent * t.element_size()


def element_offsets(t) -> np.ndarray:
    """Offset (in elements, from ``t``'s first element) of every element of ``t``, shape of ``t``."""
    off = np.zeros(tuple(t.shape), np.int64)
    for d, (n, st) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[d] = n
        off = off + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return off


class GlobalMemory:
    def __init__(self, spans: Iterable[Tuple[int, int, str]], track_writers: bool = False):
        spans = sorted((s, e, n) for s, e, n in spans if e > s)
        merged: List[list] = []
        for s, e, n in spans:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
                merged[-1][2] += "," + n
            else:
                merged.append([s, e, n])
        self.regions = [
            Region(s, e, np.ctypeslib.as_array((ctypes.c_uint8 * (e - s)).from_address(s)), n,
                   np.full(e - s, -1, np.int64) if track_writers else None)
            for s, e, n in merged
        ]
        self.starts = np.array([r.start for r in self.regions], np.int64)
        self.ends = np.array([r.end for r in self.regions], np.int64)

    def _locate(self, addr: np.ndarray, nbytes: int):
        if not self.regions:
            return np.zeros(addr.shape, np.int64), np.zeros(addr.shape, np.bool_)
        ri = np.searchsorted(self.starts, addr, side="right") - 1
        ric = np.clip(ri, 0, None)
        ok = (ri >= 0) & (addr + nbytes <= self.ends[ric])
        return ric, ok

    def _by_region(self, addr: np.ndarray, nbytes: int, active: np.ndarray):
        """Out-of-bounds lanes, and per region touched: (region, lane selector, byte indices)."""
        ri, ok = self._locate(addr, nbytes)
        good = ok & active
        span = np.arange(nbytes)
        groups = []
        for r in np.unique(ri[good]) if good.any() else ():
            reg = self.regions[r]
            sel = good & (ri == r)
            groups.append((reg, sel, (addr[sel] - reg.start)[:, None] + span))
        return active & ~ok, groups

    def read(self, addr: np.ndarray, nbytes: int, active: np.ndarray, visit=None):
        """Bytes at ``addr`` (L,) -> (L, nbytes) uint8, and the lanes that were out of bounds.
        ``visit(region, byte offsets)`` sees every region touched (the race checker)."""
        out = np.zeros((addr.shape[0], nbytes), np.uint8)
        oob, groups = self._by_region(addr, nbytes, active)
        for reg, sel, idx in groups:
            out[sel] = reg.data[idx]
            if visit is not None:
                visit(reg, idx)
        return out, oob

    def write(self, addr: np.ndarray, data: np.ndarray, active: np.ndarray, writer: int = -1, visit=None):
        """Store (L, nbytes) bytes for workgroup ``writer`` (linear id); returns the
        out-of-bounds lanes (which were dropped). ``visit`` as for ``read``."""
        oob, groups = self._by_region(addr, data.shape[1], active)
        for reg, sel, idx in groups:
            if visit is not None:
                visit(reg, idx)
            # Lanes are applied in order, so the highest lane wins on overlap (one valid HW order).
            reg.data[idx] = data[sel]
            if reg.writer is not None:
                reg.writer[idx] = writer
        return oob

    def writers_of(self, t) -> np.ndarray:
        """Per element of the tensor ``t`` (shape of ``t``): linear id (``x + gx * (y + gy * z)``)
        of the workgroup that last wrote it; -1 when nothing wrote it, -2 when its bytes were
        last written by different workgroups. Needs ``track_writers``."""
        if any(r.writer is None for r in self.regions):
            raise ValueError("writer tracking is off: emulate(..., track_writers=True)")
        size = t.element_size()
        addr = t.data_ptr() + element_offsets(t) * size
        flat = addr.reshape(-1)
        ri, ok = self._locate(flat, size)
        if not ok.all():
            raise ValueError("tensor is not (entirely) in the kernel's global memory")
        out = np.empty(flat.shape, np.int64)
        for r in np.unique(ri):
            reg = self.regions[r]
            sel = ri == r
            w = reg.writer[(flat[sel] - reg.start)[:, None] + np.arange(size)]
            out[sel] = np.where((w == w[:, :1]).all(axis=1), w[:, 0], -2)
        return out.reshape(addr.shape)
