"""Translate IR nodes into Python closures once per kernel; run blocks of them per wave.

Every op becomes ``fn(W)`` reading/writing ``W.env`` slots. Ops that can suspend the wave (a
barrier, or a region containing one) become generator functions; a block that contains any
of them runs as a generator so the workgroup scheduler can interleave waves at barriers.
Control flow (``scf``) is structured: a branch runs under a narrowed lane mask, loops with
lane-varying trip counts run until no lane is left. Unknown ops raise :class:`UnsupportedOp`
at translation time, naming the op and its source location.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .errors import EmulatorError, UnsupportedOp
from .ir_program import Block, Node, Program

#: op name -> builder(node, translator) -> fn(W) | Gen
REGISTRY: Dict[str, Callable] = {}

#: a while loop running longer than this is taken to be a spin-wait that can never finish
MAX_WHILE_TRIPS = 1_000_000

#: ops that suspend the wave at a workgroup barrier
BARRIER_OPS = {"gpu.barrier", "rocdl.s.barrier", "rocdl.barrier"}


class Gen:
    """Marks a step that is a generator function (it may yield at a barrier)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


def register(*names):
    def deco(builder):
        for n in names:
            REGISTRY[n] = builder
        return builder

    return deco


def expand_cond(c: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Lane condition (L,) -> broadcastable against a value with vector dims."""
    extra = np.ndim(like) - np.ndim(c)
    return c.reshape(c.shape + (1,) * extra) if extra > 0 else c


def merge(cond: np.ndarray, a, b):
    """Per-lane select between two values of the same type (tuples for structs)."""
    if isinstance(a, tuple):
        return tuple(merge(cond, x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a if b is None else b
    if not isinstance(a, np.ndarray):
        return a  # opaque uniform values (buffer resources) cannot diverge here
    return np.where(expand_cond(cond, a), a, b)


class CBlock:
    """A compiled block: ``run(W)`` or, if it may suspend, ``gen(W)``; both return the terminator values."""

    def __init__(self, steps, may_yield: bool, term):
        self.may_yield = may_yield
        self.term = term  # fn(W) -> tuple of values, or None
        plain = [s for s in steps]
        self._steps = plain
        if not may_yield:
            fns = tuple(plain)
            t = term

            def run(W):
                for f in fns:
                    f(W)
                return t(W) if t is not None else ()

            self.run = run
        else:
            seq = tuple((s.fn, True) if isinstance(s, Gen) else (s, False) for s in plain)
            t = term

            def gen(W):
                for f, g in seq:
                    if g:
                        yield from f(W)
                    else:
                        f(W)
                return t(W) if t is not None else ()

            self.gen = gen

            def run(W):
                raise EmulatorError("internal: barrier-containing block run without scheduler")

            self.run = run

    def as_gen(self):
        if self.may_yield:
            return self.gen

        run = self.run

        def g(W):
            return run(W)
            yield  # pragma: no cover  (makes this a generator)

        return g


TERMINATORS = {"scf.yield", "scf.condition", "gpu.return", "func.return", "llvm.return"}


class Translator:
    def __init__(self, program: Program, lds_offsets: Dict[str, int], host: bool = False):
        self.program = program
        self.lds_offsets = lds_offsets
        self.host = host
        self.launches: List[dict] = []  # host: filled by gpu.launch_func
        # value id -> attribute value of its arith/llvm constant
        self._constants: Optional[Dict[int, Any]] = None

    def constant_of(self, value_id: int):
        """``(True, value)`` if ``value_id`` is defined by ``arith.constant`` / ``llvm.mlir.constant``,
        else ``(False, None)``: lets an op tell compile-time constants from run-time values."""
        if self._constants is None:
            consts: Dict[int, Any] = {}

            def walk(blk):
                for n in blk.ops:
                    if n.name in ("arith.constant", "llvm.mlir.constant") and n.results:
                        consts[n.results[0]] = n.attrs.get("value")
                    for r in n.regions:
                        for b in r:
                            walk(b)

            for f in list(self.program.kernels.values()) + list(self.program.host_funcs.values()):
                walk(f.body)
            self._constants = consts
        constants = self._constants
        if value_id in constants:
            return True, constants[value_id]
        return False, None

    def block_may_yield(self, blk: Block) -> bool:
        for n in blk.ops:
            if n.name in BARRIER_OPS:
                return True
            for r in n.regions:
                for b in r:
                    if self.block_may_yield(b):
                        return True
        return False

    def compile_block(self, blk: Block) -> CBlock:
        steps = []
        term = None
        for n in blk.ops:
            if n.name in TERMINATORS:
                ids = list(n.operands)

                def term(W, ids=ids):
                    e = W.env
                    return tuple(e[i] for i in ids)

                continue
            builder = REGISTRY.get(n.name)
            if builder is None:
                raise UnsupportedOp(n.name, "no emulator semantics", n.loc)
            step = builder(n, self)
            if step is None:  # pure no-op (scheduling hints)
                continue
            steps.append(step)
        may_yield = any(isinstance(s, Gen) for s in steps)
        return CBlock(steps, may_yield, term)


# --------------------------------------------------------------------------------------------
# scf: structured control flow under lane masks
# --------------------------------------------------------------------------------------------


def _drive(gen):
    """Run a generator that cannot yield (its regions hold no barrier) to its return value."""
    try:
        next(gen)
    except StopIteration as done:
        return done.value
    raise EmulatorError("internal: a barrier-free region suspended")


def _step(body_gen, may_yield: bool):
    """One step from a generator body: the generator itself when the op may suspend, else a
    plain function that drives it (regions then run as plain calls inside it)."""
    if may_yield:
        return Gen(body_gen)
    return lambda W: _drive(body_gen(W))


@register("scf.if")
def _scf_if(n: Node, T: Translator):
    cid = n.operands[0]
    then_b = T.compile_block(n.regions[0][0])
    else_b = T.compile_block(n.regions[1][0]) if len(n.regions) > 1 and n.regions[1] else None
    res = list(n.results)
    tgen = then_b.as_gen()
    egen = else_b.as_gen() if else_b is not None else None

    def assign(W, vals):
        e = W.env
        for r, v in zip(res, vals):
            e[r] = v

    def g(W):
        c = W.env[cid]
        if c.shape[0] == 1:  # uniform branch
            if c[0]:
                assign(W, (yield from tgen(W)))
            elif egen is not None:
                assign(W, (yield from egen(W)))
            return
        saved = W.mask
        mt = saved & c
        me = saved & ~c
        tv = ev = None
        try:
            if mt.any():
                W.mask = mt
                tv = yield from tgen(W)
            if egen is not None and me.any():
                W.mask = me
                ev = yield from egen(W)
        finally:
            W.mask = saved
        if res:
            if tv is None:
                tv = ev
            if ev is None:
                ev = tv
            assign(W, [merge(c, a, b) for a, b in zip(tv, ev)])

    return _step(g, then_b.may_yield or (else_b is not None and else_b.may_yield))


@register("scf.for")
def _scf_for(n: Node, T: Translator):
    lb, ub, step = n.operands[:3]
    inits = n.operands[3:]
    body = T.compile_block(n.regions[0][0])
    iv = n.regions[0][0].args[0]
    iter_args = n.regions[0][0].args[1:]
    res = list(n.results)
    body_gen = body.as_gen()

    def g(W):
        e = W.env
        l, u, s, carried = e[lb], e[ub], e[step], [e[i] for i in inits]
        if l.shape[0] == 1 and u.shape[0] == 1 and s.shape[0] == 1:
            dt = l.dtype
            for i in range(int(l[0]), int(u[0]), int(s[0])):
                e[iv] = np.array([i], dt)
                for a, v in zip(iter_args, carried):
                    e[a] = v
                carried = yield from body_gen(W)
        elif body.may_yield:
            raise EmulatorError(f"scf.for with lane-varying bounds around a barrier at {n.loc}")
        else:
            carried = _masked_for(W, l, u, s, carried, iv, iter_args, body.run)
        for r, v in zip(res, carried):
            e[r] = v

    return _step(g, body.may_yield)


def _masked_for(W, l, u, s, carried, iv, iter_args, run):
    e = W.env
    saved = W.mask
    i = np.broadcast_to(l, saved.shape).astype(l.dtype)
    try:
        while True:
            active = saved & (i < u)
            if not active.any():
                break
            W.mask = active
            e[iv] = i
            for a, v in zip(iter_args, carried):
                e[a] = v
            out = run(W)
            carried = [merge(active, o, c) for o, c in zip(out, carried)]
            i = np.where(active, i + s, i)
    finally:
        W.mask = saved
    return carried


@register("scf.while")
def _scf_while(n: Node, T: Translator):
    before = T.compile_block(n.regions[0][0])
    after = T.compile_block(n.regions[1][0])
    if before.may_yield or after.may_yield:
        raise UnsupportedOp("scf.while", "barrier inside a while loop", n.loc)
    bargs = n.regions[0][0].args
    aargs = n.regions[1][0].args
    inits = list(n.operands)
    res = list(n.results)
    brun, arun = before.run, after.run

    def f(W):
        e = W.env
        carried = [e[i] for i in inits]
        saved = W.mask
        active = saved.copy()
        final = None
        trips = 0
        try:
            while True:
                trips += 1
                if trips > MAX_WHILE_TRIPS:
                    raise EmulatorError(
                        f"scf.while at {n.loc} ran {MAX_WHILE_TRIPS} iterations: a spin-wait on another "
                        "workgroup? (workgroups run one after another in the emulator)"
                    )
                W.mask = active
                for a, v in zip(bargs, carried):
                    e[a] = v
                out = brun(W)  # (cond, *forwarded)
                cond, fwd = out[0], list(out[1:])
                if np.asarray(cond).shape[0] == 1 and final is None:
                    # A wave-uniform condition (a scalar loop on the hardware): every lane
                    # leaves together, and uniform carried values stay uniform.
                    if not bool(np.asarray(cond)[0]):
                        final = fwd
                        break
                    W.mask = active
                    for a, v in zip(aargs, fwd):
                        e[a] = v
                    carried = list(arun(W))
                    continue
                cond = np.broadcast_to(cond, active.shape)
                leaving = active & ~cond
                final = fwd if final is None else [merge(leaving, x, y) for x, y in zip(fwd, final)]
                active = active & cond
                if not active.any():
                    break
                W.mask = active
                for a, v in zip(aargs, fwd):
                    e[a] = v
                carried = list(arun(W))
        finally:
            W.mask = saved
        for r, v in zip(res, final):
            e[r] = v

    return f


@register("scf.execute_region")
def _scf_exec_region(n: Node, T: Translator):
    if len(n.regions[0]) != 1:
        raise UnsupportedOp("scf.execute_region", "multiple blocks", n.loc)
    b = T.compile_block(n.regions[0][0])
    res = list(n.results)
    bgen = b.as_gen()

    def g(W):
        vals = yield from bgen(W)
        for r, v in zip(res, vals):
            W.env[r] = v

    return _step(g, b.may_yield)
