"""Happens-before race checking of global memory: atomics, fences and barriers as LLVM's
memory model (scoped, as AMDGPUUsage describes it for GFX942/GFX950) orders them.

Every wave is one thread of the model. Each carries a vector clock over all waves of the
launch; a plain (non-atomic) global access is stamped ``(wave, its own clock entry)`` per
byte, and a later conflicting access (two waves, at least one a write) races unless the
second wave's clock covers the first's stamp. Clocks flow only through synchronization:

* a *release* (``fence release``, or an atomic whose ordering is release, acq_rel or
  seq_cst) publishes the wave's clock and then advances its own entry, so what the wave
  does afterwards is not covered;
* an atomic write carries a clock to its location's synchronization object: its own clock
  when the atomic is a release, else the clock of the wave's last release fence of a wide
  enough scope (C++/LLVM fence-atomic synchronization). A read-modify-write joins the
  object's clock (it continues the release sequence); a plain atomic store replaces it;
* an atomic read takes the object's clock: at once when it is an acquire, else it is held
  until the wave's next acquire fence of a wide enough scope;
* ``s_barrier`` passes each arriving wave's last workgroup-or-wider release-fence clock to
  every wave of the workgroup, which takes it at its next such acquire fence.
  ``gpu.barrier`` is lowered by LLVM to ``fence syncscope("workgroup") release; s_barrier;
  fence syncscope("workgroup") acquire`` and is modelled as exactly that.

Scopes (``syncscope``): ``agent``, ``""`` (system) and their ``one-as`` forms synchronize
waves of different workgroups; ``workgroup`` only waves of one workgroup (an object per
workgroup); ``wavefront``/``singlethread`` nothing. Operations synchronize only when both
scopes include both waves: a workgroup-scope release seen by another workgroup's agent-scope
acquire orders nothing, as on the hardware (on gfx950 a workgroup release emits no L2
writeback, an agent one ``buffer_wbl2 sc1`` + ``s_waitcnt vmcnt(0)``; an agent acquire
``s_waitcnt vmcnt(0)`` + ``buffer_inv sc1``, a workgroup one nothing).

Limits: launches are ordered (every kernel boundary synchronizes everything; the shadow
starts empty per launch). A tensor is shadowed from the first plain write to it in the
launch, so a read that precedes every write to its tensor is not remembered (a read-then-
unsynchronized-write by another wave goes unseen there); per byte the last write and one
last read are kept. Atomics never race with atomics; they are not checked against plain
accesses. Races are reported as ``global_race`` findings.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from .checker import GLOBAL_RACE, Findings

# LLVM's AtomicOrdering (the MLIR llvm dialect's integer encoding).
NOT_ATOMIC, UNORDERED, MONOTONIC, ACQUIRE, RELEASE, ACQ_REL, SEQ_CST = 0, 1, 2, 4, 5, 6, 7
_ORDER_NAMES = {"not_atomic": 0, "unordered": 1, "monotonic": 2, "acquire": 4, "release": 5, "acq_rel": 6,
                "seq_cst": 7}

# Scope levels: who an operation synchronizes with.
WAVE_SCOPE, WG_SCOPE, AGENT_SCOPE = 0, 1, 2


def ordering_of(attr) -> int:
    """The LLVM ordering of an op's ``ordering`` attribute (absent: not atomic)."""
    if attr is None:
        return NOT_ATOMIC
    if isinstance(attr, (int, np.integer)):
        return int(attr)
    return _ORDER_NAMES[str(attr).strip('"').split(".")[-1]]


def scope_of(attr) -> int:
    """The scope level of a ``syncscope`` (absent or ``""``: system, which includes the agent)."""
    s = "" if attr is None else str(attr).strip('"')
    if s.endswith("one-as"):
        s = s[: -len("one-as")].rstrip("-")
    if s in ("", "agent"):
        return AGENT_SCOPE
    if s == "workgroup":
        return WG_SCOPE
    if s in ("wavefront", "singlethread"):
        return WAVE_SCOPE
    raise ValueError(f"unknown syncscope {attr!r}")


def is_acquire(order: int) -> bool:
    return order in (ACQUIRE, ACQ_REL, SEQ_CST)


def is_release(order: int) -> bool:
    return order in (RELEASE, ACQ_REL, SEQ_CST)


Clock = Dict[int, int]  # sparse vector clock: wave id -> epoch (absent: 0)


def _join_into(dst: Clock, src: Clock) -> None:
    for g, e in src.items():
        if dst.get(g, 0) < e:
            dst[g] = e


def _join(a: Optional[Clock], b: Optional[Clock]) -> Optional[Clock]:
    if a is None:
        return None if b is None else dict(b)
    if b is not None:
        a = dict(a)
        _join_into(a, b)
    return a


class WaveClock:
    """One wave's view: its vector clock (sparse; its own entry is ``epoch``), its last
    release-fence clocks per scope level and the clocks its atomic reads (and barriers) hold
    for its next acquire fence."""

    __slots__ = ("gid", "epoch", "known", "fence_rel", "pending", "barriers")

    def __init__(self, gid: int):
        self.gid = gid
        self.epoch = 1
        self.known: Clock = {}
        self.fence_rel: Dict[int, Clock] = {}
        self.pending: Dict[int, Clock] = {}
        self.barriers = 0

    def covers(self, gid: int, epoch: int) -> bool:
        return gid == self.gid or self.known.get(gid, 0) >= epoch

    def acquire(self, clock: Clock) -> None:
        _join_into(self.known, clock)
        self.known.pop(self.gid, None)

    def release(self) -> Clock:
        snap = dict(self.known)
        snap[self.gid] = self.epoch
        self.epoch += 1
        return snap

    def fence(self, order: int, level: int) -> None:
        if level == WAVE_SCOPE:
            return
        if is_acquire(order):
            for lv in (WG_SCOPE, AGENT_SCOPE):
                if lv <= level and lv in self.pending:
                    self.acquire(self.pending.pop(lv))
        if is_release(order):
            snap = self.release()
            for lv in (WG_SCOPE, AGENT_SCOPE):
                if lv <= level:
                    self.fence_rel[lv] = snap

    def hold(self, level: int, clock: Clock) -> None:
        cur = self.pending.get(level)
        if cur is None:
            self.pending[level] = dict(clock)
        else:
            _join_into(cur, clock)


class GlobalShadow:
    """The launch's happens-before state: synchronization objects, barrier clocks and the
    per-byte stamps of plain accesses (allocated per tensor region at its first write)."""

    def __init__(self, waves_per_group: int, groups: int, findings: Findings):
        self.waves_per_group = waves_per_group
        self.findings = findings
        self.objects: Dict[Tuple, Clock] = {}
        self.barrier_clocks: Dict[Tuple[int, int], list] = {}
        self.stamps: Dict[int, Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def wave_clock(self, group: int, wave: int) -> WaveClock:
        return WaveClock(group * self.waves_per_group + wave)

    # -- synchronization ---------------------------------------------------------------------

    def _key(self, W, level: int, addr: int):
        if level >= AGENT_SCOPE:
            return ("agent", addr)
        if level == WG_SCOPE:
            return ("workgroup", W.wg.linear_id, addr)
        return None

    def atomic(self, W, addrs, order: int, level: int, reads: bool, writes: bool, rmw: bool) -> None:
        """An atomic access of wave ``W`` to the locations ``addrs`` (its active lanes, in lane
        order): a read-modify-write (``rmw``), an atomic load (``reads``) or store (``writes``)."""
        hb: WaveClock = W.hb
        if level == WAVE_SCOPE:
            return
        release_snap = hb.release() if writes and is_release(order) else None
        for addr in addrs:
            key = self._key(W, level, int(addr))
            if reads:
                obj = self.objects.get(key)
                if obj is not None:
                    if is_acquire(order):
                        hb.acquire(obj)
                    else:
                        hb.hold(level, obj)
            if writes:
                carried = release_snap if release_snap is not None else hb.fence_rel.get(level)
                if rmw:
                    joined = _join(self.objects.get(key), carried)
                    if joined is not None:
                        self.objects[key] = joined
                elif carried is None:
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = dict(carried)

    def barrier_arrive(self, W) -> None:
        hb: WaveClock = W.hb
        key = (W.wg.linear_id, hb.barriers)
        slot = self.barrier_clocks.setdefault(key, [None, 0])
        slot[0] = _join(slot[0], hb.fence_rel.get(WG_SCOPE))

    def barrier_leave(self, W) -> None:
        hb: WaveClock = W.hb
        key = (W.wg.linear_id, hb.barriers)
        slot = self.barrier_clocks[key]
        if slot[0] is not None:
            hb.hold(WG_SCOPE, slot[0])
        slot[1] += 1
        if slot[1] >= W.wg.nwaves:
            del self.barrier_clocks[key]
        hb.barriers += 1

    # -- plain accesses ----------------------------------------------------------------------

    def access(self, W, region, idx: np.ndarray, write: bool, loc: str) -> None:
        """Plain access of wave ``W`` to the bytes ``idx`` (offsets into ``region``)."""
        st = self.stamps.get(region.start)
        if st is None:
            if not write:
                return
            size = region.end - region.start
            st = (np.full(size, -1, np.int32), np.zeros(size, np.int32), np.full(size, -1, np.int32),
                  np.zeros(size, np.int32))
            self.stamps[region.start] = st
        w_gid, w_ep, r_gid, r_ep = st
        idx = idx.ravel()
        hb: WaveClock = W.hb
        me = hb.gid
        self._check(W, w_gid[idx], w_ep[idx], "written", write, loc)
        if write:
            self._check(W, r_gid[idx], r_ep[idx], "read", write, loc)
            w_gid[idx] = me
            w_ep[idx] = hb.epoch
            r_gid[idx] = -1
        else:
            r_gid[idx] = me
            r_ep[idx] = hb.epoch

    def _check(self, W, gids: np.ndarray, eps: np.ndarray, what: str, write: bool, loc: str) -> None:
        hb: WaveClock = W.hb
        other = (gids >= 0) & (gids != hb.gid)
        if not other.any():
            return
        og, oe = gids[other], eps[other]
        latest: Dict[int, int] = {}
        for g_, e_ in zip(*np.unique(np.stack([og, oe]), axis=1)):
            latest[int(g_)] = max(latest.get(int(g_), 0), int(e_))
        racy = [g_ for g_, e_ in latest.items() if not hb.covers(g_, e_)]
        if not racy:
            return
        g = racy[0]
        wg, wave = divmod(g, self.waves_per_group)
        me_wg, me_wave = divmod(hb.gid, self.waves_per_group)
        self.findings.add(
            GLOBAL_RACE,
            f"global {'write' if write else 'read'} by workgroup {me_wg} wave {me_wave} of bytes {what} by "
            f"workgroup {wg} wave {wave} with no happens-before between them (a release/acquire pair of a "
            f"scope that includes both, or a barrier with workgroup fences)",
            loc, W.wg.block_id, W.wave_id,
        )
