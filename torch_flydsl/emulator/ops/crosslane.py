"""Cross-lane ops within a wave64: readfirstlane/readlane, ds_bpermute/permute, ds_swizzle,
DPP (update.dpp), mbcnt, ballot, gpu.shuffle.

Lanes whose source lane is inactive read 0 for permute/swizzle; DPP follows the
bound_ctrl/row_mask/bank_mask rules of the ISA (invalid source: write 0 if bound_ctrl,
otherwise keep ``old``).
"""

from __future__ import annotations

import numpy as np

from ..errors import EmulatorError, UnsupportedOp
from ..translate import register

WAVE = 64


def _full(x, lanes):
    return x if x.shape[0] == lanes else np.broadcast_to(x, (lanes,) + x.shape[1:])


def _first_active_index(W):
    idx = np.flatnonzero(W.mask)
    return int(idx[0]) if idx.size else 0


@register("rocdl.readfirstlane")
def _readfirstlane(n, T):
    a, r = n.operands[0], n.results[0]

    def step(W):
        x = W.env[a]
        W.env[r] = x if x.shape[0] == 1 else x[_first_active_index(W)][None].copy()

    return step


@register("rocdl.readlane")
def _readlane(n, T):
    a, l = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        x, li = e[a], e[l]
        if li.shape[0] != 1 and not (li == li[0]).all():
            raise EmulatorError(f"readlane with a lane-varying lane index at {n.loc}")
        lane = int(li[0]) % WAVE
        e[r] = x if x.shape[0] == 1 else x[lane][None].copy()

    return step


def _gather(W, x, src, valid):
    """Value of lane src[i] for each lane i, 0 where not valid or the source lane is inactive."""
    lanes = W.lanes
    xf = _full(x, lanes)
    src = np.clip(src, 0, lanes - 1)
    ok = valid & W.mask[src]
    out = xf[src].copy()
    if not ok.all():
        out[~ok] = 0
    return out, ok


@register("rocdl.ds_bpermute")
def _bpermute(n, T):
    addr, data = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        src = (_full(e[addr], W.lanes).astype(np.int64) >> 2) & (WAVE - 1)
        out, _ = _gather(W, e[data], src, np.ones(W.lanes, np.bool_))
        e[r] = out

    return step


@register("rocdl.ds_permute")
def _permute(n, T):
    addr, data = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        lanes = W.lanes
        dst = (_full(e[addr], lanes).astype(np.int64) >> 2) & (WAVE - 1)
        x = _full(e[data], lanes)
        out = np.zeros_like(x)
        for i in np.flatnonzero(W.mask):  # later lanes win, as in hardware order
            out[dst[i]] = x[i]
        e[r] = out

    return step


@register("rocdl.ds_swizzle")
def _swizzle(n, T):
    data, pat = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        p = e[pat]
        if p.shape[0] != 1:
            raise EmulatorError(f"ds_swizzle with non-constant pattern at {n.loc}")
        p = int(p[0])
        i = W.lane
        if p & 0x8000:  # quad-permute mode
            sel = (p >> (2 * (i % 4))) & 3
            src = (i & ~3) + sel
        else:  # bit-mask mode within 32-lane halves
            and_m, or_m, xor_m = p & 0x1F, (p >> 5) & 0x1F, (p >> 10) & 0x1F
            src = (i & 0x20) | ((((i & 0x1F) & and_m) | or_m) ^ xor_m)
        out, _ = _gather(W, e[data], src, np.ones(W.lanes, np.bool_))
        e[r] = out

    return step


def _dpp_source(ctrl: int, lane: np.ndarray):
    """(source lane, valid) for a DPP control word (GFX9 encoding)."""
    row_base = lane & ~15
    r = lane & 15
    if ctrl <= 0xFF:  # quad_perm
        sel = (ctrl >> (2 * (lane % 4))) & 3
        return (lane & ~3) + sel, np.ones_like(lane, np.bool_)
    if 0x101 <= ctrl <= 0x10F:  # row_shl
        s = ctrl & 0xF
        return row_base + r + s, r + s < 16
    if 0x111 <= ctrl <= 0x11F:  # row_shr
        s = ctrl & 0xF
        return row_base + r - s, r - s >= 0
    if 0x121 <= ctrl <= 0x12F:  # row_ror
        s = ctrl & 0xF
        return row_base + (r - s) % 16, np.ones_like(lane, np.bool_)
    if ctrl == 0x130:  # wave_shl1
        return lane + 1, lane + 1 < WAVE
    if ctrl == 0x134:  # wave_rol1
        return (lane + 1) % WAVE, np.ones_like(lane, np.bool_)
    if ctrl == 0x138:  # wave_shr1
        return lane - 1, lane - 1 >= 0
    if ctrl == 0x13C:  # wave_ror1
        return (lane - 1) % WAVE, np.ones_like(lane, np.bool_)
    if ctrl == 0x140:  # row_mirror
        return row_base + 15 - r, np.ones_like(lane, np.bool_)
    if ctrl == 0x141:  # row_half_mirror
        return (lane & ~7) + 7 - (lane & 7), np.ones_like(lane, np.bool_)
    if ctrl == 0x142:  # row_bcast:15 -> lane 15 of the previous row, into rows 1..3
        return row_base - 1, lane >= 16
    if ctrl == 0x143:  # row_bcast:31 -> lane 31, into rows 2..3
        return np.full_like(lane, 31), lane >= 32
    raise UnsupportedOp("rocdl.update.dpp", f"dpp_ctrl {ctrl:#x}")


@register("rocdl.update.dpp")
def _update_dpp(n, T):
    old, src = n.operands[:2]
    ctrl = int(n.attrs["dppCtrl"])
    row_mask = int(n.attrs["rowMask"])
    bank_mask = int(n.attrs["bankMask"])
    bound_ctrl = bool(n.attrs["boundCtrl"])
    _dpp_source(ctrl, np.arange(WAVE))  # validate at translation time
    r = n.results[0]

    def step(W):
        e = W.env
        lanes = W.lanes
        lane = W.lane
        s, valid = _dpp_source(ctrl, lane)
        sc = np.clip(s, 0, lanes - 1)
        valid = valid & W.mask[sc]
        xs = _full(e[src], lanes)
        xo = _full(e[old], lanes)
        moved = xs[sc]
        fill = np.zeros_like(moved) if bound_ctrl else xo
        out = np.where(_expand(valid, moved), moved, fill)
        writes = (((row_mask >> (lane // 16)) & 1) != 0) & (((bank_mask >> ((lane % 16) // 4)) & 1) != 0)
        e[r] = np.where(_expand(writes, out), out, xo)

    return step


def _expand(c, like):
    return c.reshape(c.shape + (1,) * (like.ndim - 1))


@register("rocdl.mbcnt.lo", "rocdl.mbcnt.hi")
def _mbcnt(n, T):
    m, base = n.operands[:2]
    hi = n.name.endswith("hi")
    r = n.results[0]

    def step(W):
        e = W.env
        mask = _full(e[m], W.lanes).astype(np.int64) & 0xFFFFFFFF
        lane = W.lane
        nbits = np.clip(lane - 32, 0, 32) if hi else np.clip(lane, 0, 32)
        below = mask & ((np.int64(1) << nbits) - 1)
        cnt = np.zeros(W.lanes, np.int64)
        for b in range(32):
            cnt += (below >> b) & 1
        e[r] = (cnt + e[base]).astype(np.int32)

    return step


@register("rocdl.ballot")
def _ballot(n, T):
    p, r = n.operands[0], n.results[0]
    dt = n.result_types[0].scalar.np_dtype

    def step(W):
        pv = _full(W.env[p], W.lanes) & W.mask
        bits = sum(int(1) << int(i) for i in np.flatnonzero(pv))
        if dt == np.int32:
            bits &= 0xFFFFFFFF
        W.env[r] = np.array([bits], np.uint64).astype(dt)

    return step


@register("gpu.shuffle")
def _gpu_shuffle(n, T):
    mode = str(n.attrs.get("mode", "")).strip()
    kind = mode.split()[-1].rstrip(">") if mode else "xor"
    val, off, width = n.operands[:3]
    r_val, r_ok = n.results[:2]

    def step(W):
        e = W.env
        lanes = W.lanes
        lane = W.lane
        o = _full(e[off], lanes).astype(np.int64)
        w = int(_full(e[width], lanes)[0])
        base = lane - lane % w
        if kind == "xor":
            src = lane ^ o
        elif kind == "down":
            src = lane + o
        elif kind == "up":
            src = lane - o
        elif kind == "idx":
            src = base + o
        else:
            raise UnsupportedOp("gpu.shuffle", f"mode {mode}", n.loc)
        valid = (src >= base) & (src < base + w) & (src >= 0) & (src < lanes)
        sc = np.clip(src, 0, lanes - 1)
        valid = valid & W.mask[sc]
        x = _full(e[val], lanes)
        e[r_val] = np.where(_expand(valid, x), x[sc], x)
        e[r_ok] = valid

    return step


def _swap_builder(row: int):
    """v_permlane{16,32}_swap_b32 (gfx950): with rows of ``row`` lanes, the odd rows of
    ``old`` (vdst) and the even rows of ``src`` are exchanged. Returns the struct
    {new vdst, new src}. Per the CDNA4 ISA description; inactive lanes are not modelled."""

    def builder(n, T):
        old, src = n.operands[:2]
        r = n.results[0]

        def step(W):
            e = W.env
            if not W.mask.all():
                raise EmulatorError(f"{n.name} with inactive lanes at {n.loc} is not modelled")
            lanes = W.lanes
            o = np.array(_full(e[old], lanes))
            s = np.array(_full(e[src], lanes))
            lane = W.lane
            odd = (lane // row) % 2 == 1
            new_o, new_s = o.copy(), s.copy()
            new_o[odd] = s[lane[odd] - row]
            new_s[lane[odd] - row] = o[odd]
            e[r] = (new_o, new_s)

        return step

    return builder


register("rocdl.permlane16.swap")(_swap_builder(16))
register("rocdl.permlane32.swap")(_swap_builder(32))
