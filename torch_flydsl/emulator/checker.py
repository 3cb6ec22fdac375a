"""Findings about a kernel run: LDS races, reads before async-load waits, OOB, uninitialized LDS,
global-memory races (their happens-before model is ``hb.py``).

LDS is shadowed byte by byte. A *phase* is the stretch between two barrier releases of the
workgroup: two accesses to the same LDS byte by different waves in the same phase, at least
one a write, are unordered on the hardware (a race). Direct-to-LDS async loads mark their
destination bytes *pending* until the issuing wave's ``s_waitcnt vmcnt`` retires them; any
access to pending bytes is reported. Findings are deduplicated by (kind, source location).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

RACE = "lds_race"
ASYNC_READ_BEFORE_WAIT = "lds_read_before_async_wait"
GLOBAL_OOB = "global_out_of_bounds"
LDS_OOB = "lds_out_of_bounds"
LDS_UNINIT = "lds_uninitialized_read"
GLOBAL_RACE = "global_race"  # emulator/hb.py: plain global accesses of two waves with no happens-before

#: Kinds that make a kernel run count as failed in the harness.
ERROR_KINDS = (RACE, ASYNC_READ_BEFORE_WAIT, GLOBAL_OOB, LDS_OOB, LDS_UNINIT, GLOBAL_RACE)


@dataclass
class Finding:
    kind: str
    message: str
    location: str
    workgroup: Tuple[int, int, int]
    wave: int
    count: int = 1

    def __str__(self) -> str:
        n = f" (x{self.count})" if self.count > 1 else ""
        return f"[{self.kind}] {self.message} at {self.location} (workgroup {self.workgroup}, wave {self.wave}){n}"


class Findings:
    def __init__(self, limit_per_key: int = 1):
        self._by_key: Dict[Tuple[str, str], Finding] = {}
        self.limit_per_key = limit_per_key

    def add(self, kind, message, location, workgroup, wave):
        key = (kind, location)
        f = self._by_key.get(key)
        if f is None:
            self._by_key[key] = Finding(kind, message, location, tuple(workgroup), wave)
        else:
            f.count += 1

    def all(self) -> List[Finding]:
        return list(self._by_key.values())


class LdsShadow:
    """Per-byte shadow state of one workgroup's LDS."""

    def __init__(self, size: int, findings: Findings, workgroup):
        self.size = size
        self.findings = findings
        self.workgroup = workgroup
        self.written = np.zeros(size, np.bool_)
        self.w_wave = np.full(size, -1, np.int16)
        self.w_phase = np.full(size, -1, np.int32)
        self.r_phase = np.full(size, -1, np.int32)
        self.r_mask = np.zeros(size, np.uint32)
        self.pending = np.full(size, -1, np.int64)  # async op id in flight, -1 if none

    def on_read(self, idx: np.ndarray, wave: int, phase: int, loc: str):
        if idx.size == 0:
            return
        if not self.written[idx].all():
            self.findings.add(LDS_UNINIT, "read of LDS bytes never written", loc, self.workgroup, wave)
        racy = (self.w_phase[idx] == phase) & (self.w_wave[idx] != wave)
        if racy.any():
            other = int(self.w_wave[idx][racy][0])
            self.findings.add(
                RACE,
                f"LDS read by wave {wave} of bytes written by wave {other} with no barrier in between",
                loc,
                self.workgroup,
                wave,
            )
        if (self.pending[idx] >= 0).any():
            self.findings.add(
                ASYNC_READ_BEFORE_WAIT,
                "LDS read of bytes targeted by an async (direct-to-LDS) load before its s_waitcnt",
                loc,
                self.workgroup,
                wave,
            )
        stale = self.r_phase[idx] != phase
        if stale.any():
            sidx = idx[stale]
            self.r_mask[sidx] = 0
            self.r_phase[sidx] = phase
        self.r_mask[idx] |= np.uint32(1 << wave)

    def on_write(self, idx: np.ndarray, wave: int, phase: int, loc: str, async_op: int = -1):
        if idx.size == 0:
            return
        waw = (self.w_phase[idx] == phase) & (self.w_wave[idx] != wave)
        war = (self.r_phase[idx] == phase) & ((self.r_mask[idx] & np.uint32(~(1 << wave) & 0xFFFFFFFF)) != 0)
        if waw.any() or war.any():
            what = "written" if waw.any() else "read"
            self.findings.add(
                RACE,
                f"LDS write by wave {wave} to bytes {what} by another wave with no barrier in between",
                loc,
                self.workgroup,
                wave,
            )
        if async_op < 0 and (self.pending[idx] >= 0).any():
            self.findings.add(
                ASYNC_READ_BEFORE_WAIT,
                "LDS write to bytes targeted by an async load that has not been waited for",
                loc,
                self.workgroup,
                wave,
            )
        self.written[idx] = True
        self.w_wave[idx] = wave
        self.w_phase[idx] = phase
        if async_op >= 0:
            self.pending[idx] = async_op

    def retire(self, idx: np.ndarray, op_id: int):
        sel = self.pending[idx] == op_id
        self.pending[idx[sel]] = -1
