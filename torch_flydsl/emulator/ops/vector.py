"""vector dialect ops (and llvm aggregate ops): shape manipulation on the per-lane vector axes."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOp
from ..translate import register

_DYN = -9223372036854775808  # kDynamic in static_position


def _lane_full(x, lanes):
    return x if x.shape[0] == lanes else np.broadcast_to(x, (lanes,) + x.shape[1:])


@register("vector.extract")
def _extract(n, T):
    pos = n.attrs.get("static_position", [])
    if any(p == _DYN for p in pos):
        dyn = list(n.operands[1:])
        src = n.operands[0]
        r = n.results[0]

        def step(W):
            e = W.env
            v = e[src]
            it = iter(dyn)
            idx = []
            for p in pos:
                if p == _DYN:
                    d = e[next(it)]
                    if d.shape[0] != 1:
                        raise UnsupportedOp(n.name, "lane-varying dynamic position", n.loc)
                    idx.append(int(d[0]))
                else:
                    idx.append(p)
            e[r] = v[(slice(None),) + tuple(idx)]

        return step
    sl = (slice(None),) + tuple(pos)
    src, r = n.operands[0], n.results[0]
    scalar_result = n.result_types[0].kind != "vector"

    def step(W):
        e = W.env
        e[r] = e[src][sl]

    return step


def _insert_step(dst, val, sl, r):
    """Step writing ``val`` into a copy of ``dst`` at index ``sl`` (lane axis first)."""

    def step(W):
        e = W.env
        d, v = e[dst], e[val]
        lanes = max(d.shape[0], v.shape[0])
        out = np.array(_lane_full(d, lanes))
        out[sl] = v
        e[r] = out

    return step


@register("vector.insert")
def _insert(n, T):
    pos = n.attrs.get("static_position", [])
    if any(p == _DYN for p in pos):
        raise UnsupportedOp(n.name, "dynamic position", n.loc)
    sl = (slice(None),) + tuple(pos)
    val, dst = n.operands[:2]
    r = n.results[0]

    return _insert_step(dst, val, sl, r)


@register("vector.extract_strided_slice")
def _extract_ss(n, T):
    offs, sizes, strides = n.attrs["offsets"], n.attrs["sizes"], n.attrs.get("strides", None)
    if strides and any(s != 1 for s in strides):
        raise UnsupportedOp(n.name, "non-unit strides", n.loc)
    sl = (slice(None),) + tuple(slice(o, o + s) for o, s in zip(offs, sizes))
    src, r = n.operands[0], n.results[0]

    def step(W):
        e = W.env
        e[r] = e[src][sl]

    return step


@register("vector.insert_strided_slice")
def _insert_ss(n, T):
    offs, strides = n.attrs["offsets"], n.attrs.get("strides", None)
    if strides and any(s != 1 for s in strides):
        raise UnsupportedOp(n.name, "non-unit strides", n.loc)
    src_t = n.operand_types[0]
    dst_t = n.operand_types[1]
    src_shape = src_t.shape if src_t.kind == "vector" else ()
    lead = len(dst_t.shape) - len(src_shape)
    sl = (slice(None),) + tuple(offs[:lead]) + tuple(slice(o, o + s) for o, s in zip(offs[lead:], src_shape))
    val, dst = n.operands[:2]
    r = n.results[0]

    return _insert_step(dst, val, sl, r)


@register("vector.broadcast", "vector.splat")
def _broadcast(n, T):
    t = n.result_types[0]
    src, r = n.operands[0], n.results[0]
    shape = t.shape

    def step(W):
        e = W.env
        v = e[src]
        lanes = v.shape[0]
        vv = v.reshape((lanes,) + (1,) * (len(shape) - (v.ndim - 1)) + v.shape[1:])
        e[r] = np.broadcast_to(vv, (lanes,) + shape).copy()

    return step


@register("vector.shape_cast")
def _shape_cast(n, T):
    shape = n.result_types[0].shape
    src, r = n.operands[0], n.results[0]

    def step(W):
        e = W.env
        v = e[src]
        e[r] = v.reshape((v.shape[0],) + shape)

    return step


@register("vector.from_elements")
def _from_elements(n, T):
    shape = n.result_types[0].shape
    srcs, r = list(n.operands), n.results[0]

    def step(W):
        e = W.env
        vals = [e[s] for s in srcs]
        lanes = max(v.shape[0] for v in vals)
        out = np.stack([_lane_full(v, lanes) for v in vals], axis=1)
        e[r] = out.reshape((lanes,) + shape)

    return step


@register("vector.shuffle")
def _shuffle(n, T):
    mask = n.attrs["mask"]
    a, b = n.operands
    r = n.results[0]
    na = n.operand_types[0].shape[0]

    def step(W):
        e = W.env
        va, vb = e[a], e[b]
        lanes = max(va.shape[0], vb.shape[0])
        cat = np.concatenate([_lane_full(va, lanes), _lane_full(vb, lanes)], axis=1)
        e[r] = cat[:, mask]

    return step


@register("vector.reduction")
def _reduction(n, T):
    kind = str(n.attrs["kind"])
    k = kind.split("<")[-1].rstrip(">") if "<" in kind else kind
    fns = {"add": np.sum, "mul": np.prod, "maxnumf": np.nanmax, "minnumf": np.nanmin, "maximumf": np.max, "minimumf": np.min,
           "maxsi": np.max, "minsi": np.min, "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}
    if k not in fns:
        raise UnsupportedOp(n.name, f"kind {kind}", n.loc)
    fn = fns[k]
    t = n.result_types[0]
    src, r = n.operands[0], n.results[0]
    acc = n.operands[1] if len(n.operands) > 1 else None
    from .arith import _round

    rnd = _round(t)
    if k == "add" and t.scalar.kind == "float":
        # Hardware reduction order is a tree; we sum in float64 and round once.
        def red(v):
            return np.sum(v.astype(np.float64), axis=1).astype(t.scalar.np_dtype)
    else:
        def red(v):
            return fn(v, axis=1).astype(t.scalar.np_dtype)

    def step(W):
        e = W.env
        v = e[src]
        out = red(v.reshape(v.shape[0], -1))
        if acc is not None:
            if k == "add":
                out = out + e[acc]
            else:
                raise UnsupportedOp(n.name, "accumulator with non-add kind", n.loc)
        e[r] = rnd(out) if rnd is not None else out

    return step


@register("llvm.extractvalue")
def _extractvalue(n, T):
    pos = n.attrs["position"]
    src, r = n.operands[0], n.results[0]

    def step(W):
        v = W.env[src]
        for p in pos:
            v = v[p]
        W.env[r] = v

    return step


@register("llvm.insertvalue")
def _insertvalue(n, T):
    pos = n.attrs["position"]
    cont, val = n.operands[:2]
    r = n.results[0]

    def ins(c, path, v):
        c = list(c)
        if len(path) == 1:
            c[path[0]] = v
        else:
            c[path[0]] = ins(c[path[0]], path[1:], v)
        return tuple(c)

    def step(W):
        e = W.env
        e[r] = ins(e[cont], pos, e[val])

    return step


@register("llvm.extractelement", "vector.extractelement")
def _extractelement(n, T):
    src, idx = n.operands[:2]
    r = n.results[0]

    def step(W):
        e = W.env
        v, i = e[src], e[idx]
        lanes = max(v.shape[0], i.shape[0])
        e[r] = _lane_full(v, lanes)[np.arange(lanes), np.broadcast_to(i, (lanes,)).astype(np.int64)]

    return step


@register("llvm.insertelement", "vector.insertelement")
def _insertelement(n, T):
    vec, val, idx = n.operands[:3]
    r = n.results[0]

    def step(W):
        e = W.env
        v, x, i = e[vec], e[val], e[idx]
        lanes = max(v.shape[0], x.shape[0], i.shape[0])
        out = np.array(_lane_full(v, lanes))
        out[np.arange(lanes), np.broadcast_to(i, (lanes,)).astype(np.int64)] = np.broadcast_to(x, (lanes,))
        e[r] = out

    return step


@register("llvm.shufflevector")
def _llvm_shuffle(n, T):
    mask = n.attrs["mask"]
    a, b = n.operands
    r = n.results[0]

    def step(W):
        e = W.env
        va, vb = e[a], e[b]
        lanes = max(va.shape[0], vb.shape[0])
        cat = np.concatenate([_lane_full(va, lanes), _lane_full(vb, lanes)], axis=1)
        e[r] = cat[:, mask]

    return step
