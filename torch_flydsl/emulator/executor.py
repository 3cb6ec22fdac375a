"""Run a captured FlyDSL module: interpret the host function to get the launches, then run
every workgroup of every launch, its waves interleaved at barriers."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import ops  # noqa: F401  (registers op semantics)
from .capture import CapturedKernel, HostSlot
from .checker import ERROR_KINDS, Finding, Findings
from .errors import EmulatorError
from .hb import GlobalShadow
from .ir_program import Func, Program, read_program
from .memory import GlobalMemory
from .state import Wave, Workgroup
from .translate import CBlock, Translator
from .types import TypeInfo, byte_size


@dataclass
class LaunchRecord:
    kernel: str
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    dynamic_smem: int
    lds_bytes: int
    workgroups_run: int
    seconds: float


@dataclass
class EmulationReport:
    findings: List[Finding] = field(default_factory=list)
    launches: List[LaunchRecord] = field(default_factory=list)
    memory: Optional[GlobalMemory] = field(default=None, repr=False)  # kept with track_writers

    def writers_of(self, t) -> np.ndarray:
        """Per element of ``t``: linear id of the workgroup that last wrote it (-1: none)."""
        if self.memory is None:
            raise ValueError("run emulate(..., track_writers=True) to know who wrote what")
        return self.memory.writers_of(t)

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.kind in ERROR_KINDS]

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        lines = [f"{len(self.launches)} launch(es), {len(self.findings)} finding(s)"]
        lines += [f"  {l.kernel} grid={l.grid} block={l.block} lds={l.lds_bytes} ({l.seconds:.2f}s)" for l in self.launches]
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)


@dataclass
class KernelPlan:
    name: str
    func: Func
    body: CBlock
    lds_offsets: Dict[str, int]
    static_lds: int
    dynamic_global: Optional[str]


class CompiledProgram:
    """A module translated once: host function plan plus one plan per kernel."""

    def __init__(self, module_asm: str, host_func: Optional[str]):
        self.program: Program = read_program(module_asm)
        if host_func is None:
            pass
        elif host_func not in self.program.host_funcs:
            if len(self.program.host_funcs) == 1:
                host_func = next(iter(self.program.host_funcs))
            else:
                raise EmulatorError(f"host function {host_func!r} not in module: {list(self.program.host_funcs)}")
        self.host_name = host_func
        self.lds_offsets, self.static_lds, self.dynamic_global = self._layout_lds()
        self.host_translator = Translator(self.program, {}, host=True)
        self.host_body = None
        if host_func is not None:
            self.host_body = self.host_translator.compile_block(self.program.host_funcs[host_func].body)
        self.kernels: Dict[str, KernelPlan] = {}
        for name, f in self.program.kernels.items():
            tr = Translator(self.program, self.lds_offsets)
            self.kernels[name] = KernelPlan(name, f, tr.compile_block(f.body), self.lds_offsets, self.static_lds, self.dynamic_global)

    def _layout_lds(self):
        offsets, off, dyn = {}, 0, None
        for g in self.program.globals.values():
            if g.addr_space != 3:
                continue
            size = byte_size(g.type)
            if size == 0:
                dyn = g.name
                continue
            off = (off + g.alignment - 1) // g.alignment * g.alignment
            offsets[g.name] = off
            off += size
        if dyn is not None:
            align = max(16, self.program.globals[dyn].alignment)
            offsets[dyn] = (off + align - 1) // align * align
        return offsets, off, dyn


_CACHE: Dict[str, CompiledProgram] = {}
_CACHE_LIMIT = 16


def compiled_program(captured: CapturedKernel) -> CompiledProgram:
    key = hashlib.sha256(captured.module_asm.encode()).hexdigest() + captured.host_func
    cp = _CACHE.get(key)
    if cp is None:
        cp = CompiledProgram(captured.module_asm, captured.host_func)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = cp
    return cp


# ---- host arguments ---------------------------------------------------------------------------


def _decode_struct(raw: bytes, t: TypeInfo, pos: int = 0):
    vals = []
    for f in t.fields:
        if f.kind == "struct":
            v, pos = _decode_struct(raw, f, pos)
            vals.append(v)
            continue
        nb = byte_size(f)
        chunk = raw[pos:pos + nb]
        if len(chunk) < nb:
            raise EmulatorError(f"host slot too short for {t.text}")
        vals.append(np.frombuffer(chunk, dtype=f.np_dtype).copy())
        pos += nb
    return tuple(vals), pos


def host_arg_values(func: Func, slots: Sequence[HostSlot]):
    types = func.body.arg_types
    if len(types) != len(slots):
        raise EmulatorError(f"host function takes {len(types)} values but the jit arguments packed {len(slots)} slots")
    out: List[Optional[np.ndarray]] = []
    for t, s in zip(types, slots):
        if t.kind == "ptr":
            out.append(np.array([s.value or 0], np.int64))
        elif t.kind == "struct":
            out.append(_decode_struct(s.raw, t)[0])
        elif t.kind in ("int", "float", "index"):
            nb = byte_size(t)
            out.append(np.frombuffer(s.raw[:nb].ljust(nb, b"\0"), dtype=t.np_dtype).copy())
        elif t.kind == "token":
            out.append(None)
        else:
            raise EmulatorError(f"cannot bind host argument of type {t.text}")
    return out


# ---- running ----------------------------------------------------------------------------------


def run_host(cp: CompiledProgram, slots: Sequence[HostSlot]) -> List[dict]:
    if cp.host_name is None or cp.host_body is None:
        raise EmulatorError("the module was translated without a host function")
    func = cp.program.host_funcs[cp.host_name]
    W = Wave(None, 0, cp.program.num_values, lanes=1)
    for vid, v in zip(func.body.args, host_arg_values(func, slots)):
        W.env[vid] = v
    cp.host_translator.launches = []
    cp.host_body.run(W)
    return list(cp.host_translator.launches)


def run_workgroup(plan: KernelPlan, num_values: int, wg: Workgroup, args) -> None:
    waves = [Wave(wg, w, num_values) for w in range(wg.nwaves)]
    for W in waves:
        for vid, v in zip(plan.func.body.args, args):
            W.env[vid] = v
    body = plan.body
    if not body.may_yield:
        for W in waves:
            body.run(W)
        return
    gens = [body.gen(W) for W in waves]
    live = list(range(len(waves)))
    while live:
        waiting = []
        for i in live:
            try:
                next(gens[i])
                waiting.append(i)
            except StopIteration:
                pass
        if waiting:
            wg.phase += 1  # every live wave arrived: barrier released
        live = waiting


def run_launch(
    cp: CompiledProgram,
    launch: dict,
    mem: GlobalMemory,
    findings: Findings,
    *,
    check: bool,
    workgroups: Optional[Iterable[Tuple[int, int, int]]] = None,
) -> LaunchRecord:
    plan = cp.kernels.get(launch["kernel"])
    if plan is None:
        raise EmulatorError(f"launch of unknown kernel {launch['kernel']!r}")
    grid, block = launch["grid"], launch["block"]
    nthreads = block[0] * block[1] * block[2]
    if nthreads > 1024 or nthreads <= 0:
        raise EmulatorError(f"invalid block size {block}")
    known = plan.func.attrs.get("known_block_size")
    if isinstance(known, list) and tuple(known) != tuple(block):
        raise EmulatorError(f"kernel was compiled for block {tuple(known)} but launched with {block}")
    lds = plan.static_lds
    if plan.dynamic_global is not None:
        lds = plan.lds_offsets[plan.dynamic_global] + launch["dynamic_smem"]
    elif launch["dynamic_smem"]:
        lds += launch["dynamic_smem"]
    if lds > 160 * 1024:
        raise EmulatorError(f"kernel needs {lds} bytes of LDS; gfx950 has 160 KiB per workgroup")
    t0 = time.perf_counter()
    if workgroups is None:
        workgroups = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    count = 0
    waves = (nthreads + 63) // 64
    hb = GlobalShadow(waves, grid[0] * grid[1] * grid[2], findings) if check else None
    for bid in workgroups:
        wg = Workgroup(bid, grid, block, lds, mem, findings, check, hb)
        run_workgroup(plan, cp.program.num_values, wg, launch["args"])
        count += 1
    return LaunchRecord(plan.name, tuple(grid), tuple(block), launch["dynamic_smem"], lds, count, time.perf_counter() - t0)
