"""Barriers, waits, scheduling hints and work-item ids.

A barrier suspends the wave (the op is a generator that yields); the workgroup scheduler
releases all waves once every live wave has arrived and starts a new race-checking phase.
``s_waitcnt`` retires the wave's oldest outstanding vector-memory ops down to the encoded
vmcnt, which completes direct-to-LDS async loads. LDS (lgkm) traffic is synchronous here.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOp
from ..hb import ACQUIRE, RELEASE, WG_SCOPE, ordering_of, scope_of
from ..translate import Gen, register

_NOOPS = (
    "rocdl.sched.barrier",
    "rocdl.sched.group.barrier",
    "rocdl.iglp.opt",
    "rocdl.s.setprio",
    "rocdl.s.sleep",
    "rocdl.s.nop",
    "rocdl.sched.vgpr.count",
    "llvm.intr.assume",
    "rocdl.s.dcache.wb",
    "rocdl.s.dcache.inv",
    "rocdl.s.waitcnt.lgkm",
    "rocdl.wave.barrier",
)


def _noop(n, T):
    return None


for _n in _NOOPS:
    register(_n)(_noop)


@register("llvm.fence")
def _fence(n, T):
    """A fence orders nothing in this sequentially consistent memory; the race checker
    (``hb``) takes its ordering and scope."""
    order = ordering_of(n.attrs.get("ordering"))
    level = scope_of(n.attrs.get("syncscope"))

    def step(W):
        if W.hb is not None:
            W.hb.fence(order, level)

    return step


@register("gpu.barrier", "rocdl.s.barrier", "rocdl.barrier")
def _barrier(n, T):
    """``s_barrier``; ``gpu.barrier`` is LLVM's workgroup release fence, ``s_barrier`` and
    workgroup acquire fence (what it lowers to), so it also orders the workgroup's global
    accesses for the race checker."""
    if T.host:
        raise UnsupportedOp(n.name, "barrier in host code", n.loc)
    fenced = n.name == "gpu.barrier"

    def g(W):
        hb = W.wg.hb if W.hb is not None else None
        if hb is not None:
            if fenced:
                W.hb.fence(RELEASE, WG_SCOPE)
            hb.barrier_arrive(W)
        yield "barrier"
        if hb is not None:
            hb.barrier_leave(W)
            if fenced:
                W.hb.fence(ACQUIRE, WG_SCOPE)

    return Gen(g)


def decode_vmcnt(imm: int) -> int:
    """gfx9 s_waitcnt simm16: vmcnt = bits[3:0] | bits[15:14] << 4."""
    return (imm & 0xF) | (((imm >> 14) & 0x3) << 4)


def retire_vm(W, keep: int):
    q = W.vm_queue
    shadow = W.wg.shadow
    while len(q) > keep:
        op_id, idx = q.popleft()
        if op_id >= 0 and shadow is not None and idx is not None:
            shadow.retire(idx, op_id)


@register("rocdl.s.waitcnt")
def _waitcnt(n, T):
    imm = n.attrs.get("bitfield")
    if imm is None:
        imm = next((v for v in n.attrs.values() if isinstance(v, int)), None)
    if imm is None:
        raise UnsupportedOp(n.name, "cannot read the wait immediate", n.loc)
    keep = decode_vmcnt(int(imm))

    def step(W):
        retire_vm(W, keep)

    return step


@register("rocdl.s.wait.vmcnt", "rocdl.s.wait.loadcnt")
def _wait_vmcnt(n, T):
    keep = int(next(v for v in n.attrs.values() if isinstance(v, int)))

    def step(W):
        retire_vm(W, keep)

    return step


def _dim(n):
    d = str(n.attrs.get("dimension", "x"))
    for c in ("x", "y", "z"):
        if d.rstrip(">").endswith(c):
            return "xyz".index(c)
    raise UnsupportedOp(n.name, f"dimension {d}", n.loc)


@register("gpu.thread_id", "rocdl.workitem.id.x", "rocdl.workitem.id.y", "rocdl.workitem.id.z")
def _thread_id(n, T):
    d = _dim(n) if n.name == "gpu.thread_id" else "xyz".index(n.name[-1])
    dt = n.result_types[0].scalar.np_dtype
    r = n.results[0]

    def step(W):
        W.env[r] = W.tid[d].astype(dt)

    return step


@register("gpu.block_id", "rocdl.workgroup.id.x", "rocdl.workgroup.id.y", "rocdl.workgroup.id.z")
def _block_id(n, T):
    d = _dim(n) if n.name == "gpu.block_id" else "xyz".index(n.name[-1])
    dt = n.result_types[0].scalar.np_dtype
    r = n.results[0]

    def step(W):
        W.env[r] = np.array([W.wg.block_id[d]], dt)

    return step


@register("gpu.block_dim", "gpu.grid_dim")
def _dims(n, T):
    d = _dim(n)
    dt = n.result_types[0].scalar.np_dtype
    r = n.results[0]
    grid = n.name == "gpu.grid_dim"

    def step(W):
        W.env[r] = np.array([(W.wg.grid if grid else W.wg.block)[d]], dt)

    return step


@register("gpu.lane_id")
def _lane_id(n, T):
    dt = n.result_types[0].scalar.np_dtype
    r = n.results[0]

    def step(W):
        W.env[r] = (W.lane % 64).astype(dt)

    return step


@register("gpu.launch_func")
def _launch_func(n, T):
    if not T.host:
        raise UnsupportedOp(n.name, "launch from device code", n.loc)
    seg = n.attrs.get("operandSegmentSizes")
    names = ["async", "gx", "gy", "gz", "bx", "by", "bz", "cx", "cy", "cz", "smem", "args", "obj"]
    if seg is None or len(seg) != len(names):
        raise UnsupportedOp(n.name, f"operand segments {seg}", n.loc)
    groups = {}
    pos = 0
    for nm, cnt in zip(names, seg):
        groups[nm] = n.operands[pos:pos + cnt]
        pos += cnt
    if groups["cx"]:
        raise UnsupportedOp(n.name, "cluster launch", n.loc)
    kernel = str(n.attrs["kernel"]).split("::")[-1].lstrip("@")

    def step(W):
        e = W.env

        def val(ids):
            return int(np.asarray(e[ids[0]]).ravel()[0]) if ids else 0

        T.launches.append(
            dict(
                kernel=kernel,
                grid=(val(groups["gx"]), val(groups["gy"]), val(groups["gz"])),
                block=(val(groups["bx"]), val(groups["by"]), val(groups["bz"])),
                dynamic_smem=val(groups["smem"]),
                args=[e[i] for i in groups["args"]],
                loc=n.loc,
            )
        )

    return step
