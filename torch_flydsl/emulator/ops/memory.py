"""Memory ops: llvm load/store/GEP on global and LDS pointers, buffer resources, direct-to-LDS
async loads, atomics.

Pointer values: a global pointer is the host address of the tensor byte; an LDS pointer
(address space 3) is a byte offset into the workgroup's LDS array.

Buffer semantics (CDNA3/4 ISA, raw buffers, stride 0): the range check uses
``voffset + inst_offset`` (the SGPR offset is not range checked) against ``num_records``
bytes, per dword for accesses of 4 bytes or more; out-of-range loads return 0 and
out-of-range stores are dropped. Accesses that pass the check but fall outside the tensors
handed to the kernel are reported as global out-of-bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checker import GLOBAL_OOB, LDS_OOB
from ..errors import EmulatorError, UnsupportedOp
from ..hb import AGENT_SCOPE, MONOTONIC, NOT_ATOMIC, ordering_of, scope_of
from ..numerics import from_bytes, to_bytes
from ..translate import register
from ..types import TypeInfo, byte_size

_GEP_DYN = -2147483648


def full(x, lanes):
    return x if x.shape[0] == lanes else np.broadcast_to(x, (lanes,) + x.shape[1:])


# ---- LDS and global access primitives (shared with other op modules) ------------------------


def lds_access_idx(W, addr, nbytes, loc, active):
    """Byte indices (n_active, nbytes) of an LDS access, after bounds checking."""
    wg = W.wg
    a = full(addr, W.lanes).astype(np.int64)
    inb = (a >= 0) & (a + nbytes <= wg.lds_size)
    bad = active & ~inb
    if bad.any():
        wg.findings.add(LDS_OOB, f"LDS access of {nbytes} bytes outside the {wg.lds_size}-byte allocation", loc, wg.block_id, W.wave_id)
    ok = active & inb
    return a, ok


def lds_read(W, addr, nbytes, loc):
    wg = W.wg
    a, ok = lds_access_idx(W, addr, nbytes, loc, W.mask)
    out = np.zeros((W.lanes, nbytes), np.uint8)
    if ok.any():
        idx = a[ok][:, None] + np.arange(nbytes)
        out[ok] = wg.lds[idx]
        if wg.shadow is not None:
            wg.shadow.on_read(idx.ravel(), W.wave_id, wg.phase, loc)
    return out


def lds_write(W, addr, data, loc, active=None, async_op=-1):
    wg = W.wg
    nbytes = data.shape[1]
    a, ok = lds_access_idx(W, addr, nbytes, loc, W.mask if active is None else active)
    if ok.any():
        idx = a[ok][:, None] + np.arange(nbytes)
        if wg.shadow is not None:
            wg.shadow.on_write(idx.ravel(), W.wave_id, wg.phase, loc, async_op)
        wg.lds[idx] = data[ok]
        return idx.ravel()
    return np.zeros(0, np.int64)


def _plain_visit(W, write: bool, loc):
    """The race checker's hook for a plain (non-atomic) global access of ``W``, or None."""
    hb = W.wg.hb
    if hb is None or W.hb is None:
        return None
    return lambda reg, idx: hb.access(W, reg, idx, write, loc)


def global_read(W, addr, nbytes, loc, active=None, atomic=False):
    wg = W.wg
    active = W.mask if active is None else active
    a = full(addr, W.lanes).astype(np.int64)
    out, oob = wg.mem.read(a, nbytes, active, None if atomic else _plain_visit(W, False, loc))
    if oob.any():
        wg.findings.add(GLOBAL_OOB, f"global read of {nbytes} bytes outside every kernel tensor", loc, wg.block_id, W.wave_id)
    return out


def global_write(W, addr, data, loc, active=None, atomic=False):
    wg = W.wg
    active = W.mask if active is None else active
    a = full(addr, W.lanes).astype(np.int64)
    oob = wg.mem.write(a, data, active, wg.linear_id, None if atomic else _plain_visit(W, True, loc))
    if oob.any():
        wg.findings.add(GLOBAL_OOB, f"global write of {data.shape[1]} bytes outside every kernel tensor (dropped)", loc, wg.block_id, W.wave_id)


def count_vm_op(W, n=1):
    for _ in range(n):
        W.vm_queue.append((-1, None))


# ---- pointers ---------------------------------------------------------------------------------


@register("llvm.mlir.addressof")
def _addressof(n, T):
    name = n.attrs["global_name"]
    if name not in T.lds_offsets:
        raise UnsupportedOp(n.name, f"global @{name} is not an LDS allocation", n.loc)
    val = np.array([T.lds_offsets[name]], np.int64)
    r = n.results[0]

    def step(W):
        W.env[r] = val

    return step


def _gep_plan(elem: TypeInfo, raw, ndyn):
    """[(const_offset or None, scale)] per index: None means dynamic (scale applies)."""
    plan = []
    cur = elem
    for k, idx in enumerate(raw):
        if k == 0:
            plan.append((None if idx == _GEP_DYN else idx * byte_size(cur), byte_size(cur)))
            continue
        if cur.kind == "struct":
            if idx == _GEP_DYN:
                raise UnsupportedOp("llvm.getelementptr", "dynamic struct index")
            plan.append((sum(byte_size(f) for f in cur.fields[:idx]), 0))
            cur = cur.fields[idx]
        elif cur.kind in ("array", "vector"):
            e = cur.element
            plan.append((None if idx == _GEP_DYN else idx * byte_size(e), byte_size(e)))
            cur = e
        else:
            raise UnsupportedOp("llvm.getelementptr", f"cannot index into {cur.text}")
    return plan


@register("llvm.getelementptr")
def _gep(n, T):
    elem = n.attrs["elem_type"]
    raw = n.attrs["rawConstantIndices"]
    base = n.operands[0]
    dyn = list(n.operands[1:])
    plan = _gep_plan(elem, raw, len(dyn))
    const = sum(c for c, _ in plan if c is not None)
    dyn_scales = [s for c, s in plan if c is None]
    r = n.results[0]
    if len(dyn_scales) != len(dyn):
        raise UnsupportedOp(n.name, "index/operand mismatch", n.loc)

    if not dyn:

        def step(W):
            W.env[r] = W.env[base] + const

    elif len(dyn) == 1:
        d0, s0 = dyn[0], dyn_scales[0]

        def step(W):
            e = W.env
            e[r] = e[base] + (e[d0].astype(np.int64) * s0 + const)

    else:

        def step(W):
            e = W.env
            off = const
            for d, s in zip(dyn, dyn_scales):
                off = off + e[d].astype(np.int64) * s
            e[r] = e[base] + off

    return step


# ---- llvm.load / llvm.store ----------------------------------------------------------------------


def atomic_sync(W, addr, active, order: int, level: int, reads: bool, writes: bool, rmw: bool) -> None:
    """Tell the race checker (``hb``) about an atomic global access of the ``active`` lanes."""
    hb = W.wg.hb if W.wg is not None else None
    if hb is None or W.hb is None:
        return
    a = full(addr, W.lanes).astype(np.int64)
    hb.atomic(W, a[np.flatnonzero(active)], order, level, reads, writes, rmw)


@register("llvm.load")
def _load(n, T):
    pt = n.operand_types[0]
    t = n.result_types[0]
    nbytes = byte_size(t)
    p, r = n.operands[0], n.results[0]
    loc = n.loc
    order = ordering_of(n.attrs.get("ordering"))
    if order != NOT_ATOMIC and pt.addr_space in (0, 1):
        level = scope_of(n.attrs.get("syncscope"))

        def atomic_step(W):
            a = W.env[p]
            act = np.array([W.mask.any()]) if a.shape[0] == 1 else W.mask
            W.env[r] = from_bytes(global_read(W, a, nbytes, loc, active=act, atomic=True), t)
            atomic_sync(W, a, act, order, level, reads=True, writes=False, rmw=False)
            count_vm_op(W)

        return atomic_step
    if pt.addr_space == 3:

        def step(W):
            W.env[r] = from_bytes(lds_read(W, W.env[p], nbytes, loc), t)

        return step
    if pt.addr_space in (0, 1, 4):

        def step(W):
            a = W.env[p]
            if a.shape[0] == 1:  # uniform address: one read, uniform result
                raw = global_read(W, a, nbytes, loc, active=np.array([W.mask.any()]))
            else:
                raw = global_read(W, a, nbytes, loc)
            W.env[r] = from_bytes(raw, t)

        return step
    raise UnsupportedOp(n.name, f"load from address space {pt.addr_space}", n.loc)


@register("llvm.store")
def _store(n, T):
    v, p = n.operands[:2]
    t = n.operand_types[0]
    pt = n.operand_types[1]
    loc = n.loc
    order = ordering_of(n.attrs.get("ordering"))
    if order != NOT_ATOMIC and pt.addr_space in (0, 1):
        level = scope_of(n.attrs.get("syncscope"))

        def atomic_step(W):
            global_write(W, W.env[p], to_bytes(W.env[v], t, W.lanes), loc, atomic=True)
            atomic_sync(W, W.env[p], W.mask, order, level, reads=False, writes=True, rmw=False)
            count_vm_op(W)

        return atomic_step
    if pt.addr_space == 3:

        def step(W):
            lds_write(W, W.env[p], to_bytes(W.env[v], t, W.lanes), loc)

        return step
    if pt.addr_space in (0, 1):

        def step(W):
            global_write(W, W.env[p], to_bytes(W.env[v], t, W.lanes), loc)
            count_vm_op(W)

        return step
    raise UnsupportedOp(n.name, f"store to address space {pt.addr_space}", n.loc)


# ---- buffer resources -------------------------------------------------------------------------


@dataclass
class BufferRsrc:
    base: np.ndarray  # (1,) or (L,) int64 addresses
    stride: int
    num_records: int
    flags: int


def _uniform_int(x, what, loc):
    x = np.asarray(x)
    if x.shape[0] != 1 and not (x == x[0]).all():
        raise EmulatorError(f"{what} is not wave-uniform at {loc} (hardware takes it from SGPRs)")
    return int(x.reshape(x.shape[0], -1)[0, 0])


@register("rocdl.make.buffer.rsrc")
def _make_rsrc(n, T):
    base, stride, nrec, flags = n.operands
    r = n.results[0]
    loc = n.loc

    def step(W):
        e = W.env
        W.env[r] = BufferRsrc(
            base=e[base],
            stride=_uniform_int(e[stride], "buffer stride", loc) & 0x3FFF,
            num_records=_uniform_int(e[nrec], "buffer num_records", loc) & 0xFFFFFFFF,
            flags=_uniform_int(e[flags], "buffer flags", loc),
        )

    return step


def _buffer_addr(W, rs: BufferRsrc, voff, soff, imm, nbytes, loc):
    """Per-lane addresses and an in-range mask per dword chunk: (addr (L,), ok (L, nchunks), chunk)."""
    if rs.stride != 0:
        raise EmulatorError(f"raw buffer access with non-zero stride ({rs.stride}) at {loc}: range rules not modelled")
    lanes = W.lanes
    vo = full(voff, lanes).astype(np.int64) & 0xFFFFFFFF
    so = int(full(soff, lanes).astype(np.int64)[0]) & 0xFFFFFFFF
    checked = vo + imm
    chunk = 4 if nbytes >= 4 else nbytes
    nch = nbytes // chunk
    starts = checked[:, None] + np.arange(nch) * chunk
    ok = starts + chunk <= rs.num_records
    addr = full(rs.base, lanes).astype(np.int64) + checked + so
    return addr, ok, chunk


def buffer_load_bytes(W, rs, voff, soff, imm, nbytes, loc):
    """Bytes of a raw buffer load; out-of-range chunks read 0 and are never fetched (so a
    vector running past a tensor's end is no out-of-bounds access when num_records stops it)."""
    addr, ok, chunk = _buffer_addr(W, rs, voff, soff, imm, nbytes, loc)
    if ok.all():
        return global_read(W, addr, nbytes, loc)
    raw = np.zeros((W.lanes, nbytes), np.uint8)
    for c in range(ok.shape[1]):
        sel = W.mask & ok[:, c]
        if sel.any():
            part = global_read(W, addr + c * chunk, chunk, loc, active=sel)
            raw[sel, c * chunk:(c + 1) * chunk] = part[sel]
    return raw


@register("rocdl.raw.ptr.buffer.load")
def _buffer_load(n, T):
    rsrc, voff, soff = n.operands[:3]
    t = n.result_types[0]
    nbytes = byte_size(t)
    r = n.results[0]
    loc = n.loc

    def step(W):
        e = W.env
        raw = buffer_load_bytes(W, e[rsrc], e[voff], e[soff], 0, nbytes, loc)
        e[r] = from_bytes(raw, t)
        count_vm_op(W, max(1, nbytes // 16))

    return step


@register("rocdl.raw.ptr.buffer.store")
def _buffer_store(n, T):
    val, rsrc, voff, soff = n.operands[:4]
    t = n.operand_types[0]
    nbytes = byte_size(t)
    loc = n.loc

    def step(W):
        e = W.env
        addr, ok, chunk = _buffer_addr(W, e[rsrc], e[voff], e[soff], 0, nbytes, loc)
        data = to_bytes(e[val], t, W.lanes)
        if ok.all():
            global_write(W, addr, data, loc)
        else:  # write the in-range chunks only
            for c in range(ok.shape[1]):
                sel = W.mask & ok[:, c]
                if sel.any():
                    global_write(W, addr + c * chunk, data[:, c * chunk:(c + 1) * chunk], loc, active=sel)
        count_vm_op(W, max(1, nbytes // 16))

    return step


def _first_active(x, mask, what, loc):
    x = np.asarray(x)
    if x.shape[0] == 1:
        return int(x[0])
    idx = np.flatnonzero(mask)
    return int(x[idx[0]]) if idx.size else 0


def _lds_dma(n, T, is_async: bool, from_buffer: bool):
    loc = n.loc
    if from_buffer:
        rsrc, ldsp, size, voff, soff, imm = n.operands[:6]
    else:
        gptr, ldsp, size, imm = n.operands[:4]

    def step(W):
        e = W.env
        nbytes = _uniform_int(e[size], "LDS DMA size", loc)
        if nbytes not in (1, 2, 4, 12, 16):
            raise EmulatorError(f"LDS DMA size {nbytes} is not supported by gfx950 at {loc}")
        off = _uniform_int(e[imm], "LDS DMA offset", loc)
        # M0 holds the wave-uniform LDS base; lane i lands at base + offset + i * size.
        m0 = _first_active(e[ldsp], W.mask, "LDS base", loc)
        if from_buffer:
            raw = buffer_load_bytes(W, e[rsrc], e[voff], e[soff], off, nbytes, loc)
        else:
            raw = global_read(W, full(e[gptr], W.lanes) + off, nbytes, loc)
        dst = m0 + off + W.lane * nbytes
        wg = W.wg
        op_id = -1
        if is_async:
            op_id = wg.next_async_id
            wg.next_async_id += 1
        idx = lds_write(W, dst, raw, loc, async_op=op_id)
        W.vm_queue.append((op_id, idx if is_async else None))

    return step


@register("rocdl.raw.ptr.buffer.load.async.lds")
def _buffer_lds_async(n, T):
    return _lds_dma(n, T, True, True)


@register("rocdl.raw.ptr.buffer.load.lds")
def _buffer_lds(n, T):
    # The non-async intrinsic lets the compiler insert the vmcnt wait itself.
    return _lds_dma(n, T, False, True)


@register("rocdl.global.load.async.lds", "rocdl.load.async.to.lds")
def _global_lds_async(n, T):
    return _lds_dma(n, T, True, False)


@register("rocdl.global.load.lds", "rocdl.load.to.lds")
def _global_lds(n, T):
    return _lds_dma(n, T, False, False)


# ---- atomics ----------------------------------------------------------------------------------

_RMW = {
    "add": lambda o, v: o + v,
    "fadd": lambda o, v: o + v,
    "sub": lambda o, v: o - v,
    "fsub": lambda o, v: o - v,
    "max": np.maximum,
    "min": np.minimum,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "xchg": lambda o, v: v,
    "and": lambda o, v: o & v,
    "or": lambda o, v: o | v,
    "xor": lambda o, v: o ^ v,
}


def _rmw_lanes(W, addr, val, t, fn, loc, space, active=None):
    """Apply read-modify-write lane by lane (atomic order = lane order). Returns old values."""
    from .arith import _round

    rnd = _round(t)
    nbytes = byte_size(t)
    lanes = W.lanes
    active = W.mask if active is None else active
    a = full(addr, lanes).astype(np.int64)
    v = full(val, lanes)
    old = np.zeros((lanes,) + v.shape[1:], v.dtype)
    if space == 3:
        return _rmw_lds(W, a, v, t, fn, rnd, nbytes, loc, active, old)
    for i in np.flatnonzero(active):  # global memory: lane by lane
        one = np.zeros(lanes, np.bool_)
        one[i] = True
        cur = from_bytes(global_read(W, a, nbytes, loc, active=one, atomic=True), t)
        new = fn(cur, v)
        if rnd is not None:
            new = rnd(new)
        global_write(W, a, to_bytes(new, t, lanes), loc, active=one, atomic=True)
        old[i] = cur[i]
    return old


def _rmw_lds(W, a, v, t, fn, rnd, nbytes, loc, active, old):
    """LDS read-modify-write of every active lane with the lane-order result of applying the
    lanes one after another (``old`` = what each lane's RMW read): one LDS read of the bytes
    before the instruction, the per-address chains in lane order on values, one LDS write of
    each address's final value. Same memory, results and checker events (one wave's own
    accesses) as going lane by lane, without an LDS access per lane."""
    lanes = W.lanes
    act = np.flatnonzero(active)
    if act.size == 0:
        return old
    saved = W.mask
    try:
        W.mask = np.asarray(active, np.bool_)
        cur = from_bytes(lds_read(W, a, nbytes, loc), t)
        addrs = a[act]
        uniq, first = np.unique(addrs, return_index=True)
        if uniq.size == act.size:  # distinct addresses: every lane reads memory as it was
            new = fn(cur, v)
            if rnd is not None:
                new = rnd(new)
            old[act] = cur[act]
            lds_write(W, a, to_bytes(new, t, lanes), loc)
            return old
        final = cur.copy()
        state = {}
        last = {}
        for i in act:
            ad = int(a[i])
            c = state[ad] if ad in state else cur[i]
            old[i] = c
            nv = fn(c, v[i])
            if rnd is not None:
                nv = rnd(np.asarray(nv))
            state[ad] = nv
            last[ad] = i
        writer = np.zeros(lanes, np.bool_)
        for ad, i in last.items():
            writer[i] = True
            final[i] = state[ad]
        W.mask = writer
        lds_write(W, a, to_bytes(final, t, lanes), loc)
        return old
    finally:
        W.mask = saved


@register("llvm.atomicrmw")
def _atomicrmw(n, T):
    op = str(n.attrs["bin_op"]).strip('"')
    if isinstance(n.attrs["bin_op"], int):
        names = ["xchg", "add", "sub", "and", "nand", "or", "xor", "max", "min", "umax", "umin", "fadd", "fsub", "fmax", "fmin"]
        op = names[n.attrs["bin_op"]]
    if op not in _RMW:
        raise UnsupportedOp(n.name, f"bin_op {op}", n.loc)
    p, v = n.operands[:2]
    t = n.operand_types[1]
    space = n.operand_types[0].addr_space
    r = n.results[0] if n.results else None
    fn = _RMW[op]
    loc = n.loc
    order = ordering_of(n.attrs.get("ordering", MONOTONIC))
    level = scope_of(n.attrs.get("syncscope"))

    def step(W):
        e = W.env
        old = _rmw_lanes(W, e[p], e[v], t, fn, loc, space)
        if r is not None:
            e[r] = old
        if space != 3:
            atomic_sync(W, e[p], W.mask, order, level, reads=True, writes=True, rmw=True)
            count_vm_op(W)

    return step


def _buffer_atomic(op):
    def builder(n, T):
        val, rsrc, voff, soff = n.operands[:4]
        t = n.operand_types[0]
        nbytes = byte_size(t)
        r = n.results[0] if n.results else None
        fn = _RMW[op]
        loc = n.loc

        def step(W):
            e = W.env
            addr, ok, _ = _buffer_addr(W, e[rsrc], e[voff], e[soff], 0, nbytes, loc)
            act = W.mask & ok.all(axis=1)
            old = _rmw_lanes(W, addr, e[val], t, fn, loc, 1, active=act)
            if r is not None:
                e[r] = old
            # The buffer atomic intrinsics carry no LLVM ordering: relaxed, device-wide.
            atomic_sync(W, addr, act, MONOTONIC, AGENT_SCOPE, reads=True, writes=True, rmw=True)
            count_vm_op(W)

        return builder_step(step)

    return builder


def builder_step(step):
    return step


for _op, _name in [("fadd", "fadd"), ("max", "smax"), ("fmax", "fmax"), ("add", "add")]:
    register(f"rocdl.raw.ptr.buffer.atomic.{_name}")(_buffer_atomic(_op))


# ---- gfx950 transposing LDS reads ------------------------------------------------------------


def _tr_builder(gran_bits: int, total_bits: int):
    """ds_read_b{64,96}_tr_b{4,6,8,16}: within each group of 16 lanes, each lane reads
    ``total_bits`` at its own address; the 16 reads form a block of ``16 * E`` elements of
    ``gran_bits`` (lane order, little-endian), and lane ``t`` of the group receives block
    elements ``16 * j + t`` for ``j = 0 .. E-1``. (This is the layout FlyDSL's CDNA4
    LDSReadTrans atoms declare; the tests cross-check against them.)"""
    nbytes = total_bits // 8
    per_lane = total_bits // gran_bits

    def builder(n, T):
        p = n.operands[0]
        r = n.results[0]
        t = n.result_types[0]
        loc = n.loc

        def step(W):
            raw = lds_read(W, W.env[p], nbytes, loc)  # (L, nbytes); inactive lanes read 0
            lanes = raw.shape[0]
            if lanes % 16:
                raise EmulatorError(f"{n.name} needs whole 16-lane groups at {loc}")
            bits = np.unpackbits(raw, axis=1, bitorder="little").reshape(lanes // 16, 16 * total_bits)
            elems = bits.reshape(lanes // 16, 16 * per_lane, gran_bits)
            # out[g, t, j] = elems[g, 16 j + t]
            out = elems.reshape(lanes // 16, per_lane, 16, gran_bits).transpose(0, 2, 1, 3)
            out_bytes = np.packbits(out.reshape(lanes, total_bits), axis=1, bitorder="little")
            W.env[r] = from_bytes(out_bytes, t)

        return step

    return builder


register("rocdl.ds.read.tr16.b64")(_tr_builder(16, 64))
register("rocdl.ds.read.tr8.b64")(_tr_builder(8, 64))
register("rocdl.ds.read.tr4.b64")(_tr_builder(4, 64))
register("rocdl.ds.read.tr6.b96")(_tr_builder(6, 96))
