"""Read a GEMM kernel's main K loop out of its gfx950 assembly (the ``*final_isa.s`` FlyDSL
dumps with ``FLYDSL_DUMP_IR=1``) and count what one K tile costs: the static evidence for
schedule work when no MI350 is at hand. Plain text in, numbers out; no FlyDSL, no torch.

How the loop is found:

* A listing may hold several functions (a split-K GEMM and its reduction kernel): each runs
  from the label its ``.type NAME,@function`` names to its ``.Lfunc_end*``; the code object's
  metadata after them is not read.
* Instructions are the indented lines that are not directives (``.foo``); comments after
  ``;`` or ``//`` are dropped. Labels are lines ``name:``.
* Basic blocks start at the first instruction, at every label and after every branch or
  ``s_endpgm``. ``s_branch L`` goes to L; ``s_cbranch_* L`` goes to L or falls through;
  ``s_endpgm`` and ``s_setpc_b64`` end the kernel's known flow.
* Loops are natural loops: an edge u -> h whose target h dominates u is a back edge, and the
  loop of header h is h plus every block that reaches one of its back edges without passing h.
* The **main loop** is the innermost loop (one that contains no other loop with an MFMA)
  holding the most ``v_mfma*`` instructions, over every function of the listing.

What is counted, over the main loop's instructions in **loop order**: the loop's blocks in
address order, rotated so that the header's block comes first (the order one iteration runs
when every block of the body executes; a block that an iteration may skip still counts once):

* ``mfma``: ``v_mfma*`` / ``v_smfmac*``.
* ``dma``: async global->LDS loads (``buffer_load_*`` or ``global_load_*`` with the ``lds``
  modifier, or a ``*_lds_*`` load).
* ``dma_between``: DMAs with at least one MFMA before them and at least one after them in loop
  order. The others sit in the MFMA-free stretch that wraps around the loop's back edge (a
  burst before the first MFMA or after the last one), where nothing issues matrix work while
  they go out.
* ``waits``: every ``s_waitcnt``, as written (``vmcnt(8)``, ``lgkmcnt(0)``, ...), in loop
  order; ``vmcnt`` / ``lgkmcnt`` are their counter values. A ``vmcnt(0)`` in the loop drains
  every DMA in flight, whichever path it sits on.
* ``barriers``: ``s_barrier``.
* ``branches``: every branch instruction in the loop (``s_branch``, ``s_cbranch_*``,
  ``s_setpc_b64``). A loop needs one (a fall-through only goes forward), so
  ``extra_branches = branches - 1`` is what the loop carries besides its back edge.
* ``salu``: scalar ALU instructions: ``s_*`` other than scalar memory (``s_load*``,
  ``s_buffer_*``, ``s_store*``, ``s_dcache*``, ``s_memtime``, ...) and program control
  (``s_waitcnt*``, ``s_barrier``, branches, ``s_nop``, ``s_endpgm``, ``s_setprio``,
  ``s_sleep``, ``s_sendmsg``, ...).
* ``longest_mfma_free``: the most instructions in a row without an MFMA, going round the loop
  (the stretch across the back edge included): every instruction counts one, whatever it costs.
* ``instructions``: all instructions of the loop.

Per K tile: a loop unrolled u times holds u tiles' MFMAs, so ``tiles = mfma / mfma_per_tile``
(``mfma_per_tile`` is what one wave issues for one K tile; ``mfma_per_k_tile`` computes it for
the 16x16x32 MFMA); ``per_tile(count)`` divides by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

_LABEL_RE = re.compile(r"^([A-Za-z_.$][\w.$]*):")
_WAIT_FIELD_RE = re.compile(r"\b(vmcnt|lgkmcnt|expcnt)\((\d+)\)")
_END_RE = re.compile(r"^\.Lfunc_end")
_TYPE_RE = re.compile(r"^\s*\.type\s+([\w.$]+)\s*,\s*@function")
_META_RE = re.compile(r"^(---|\s*\.amdgpu_metadata\b)")

_SMEM_PREFIXES = ("s_load", "s_buffer_", "s_store", "s_scratch_", "s_dcache", "s_memtime", "s_memrealtime",
                  "s_atc_probe", "s_atomic")
_PROGRAM_CONTROL = ("s_waitcnt", "s_barrier", "s_branch", "s_cbranch", "s_setpc", "s_nop", "s_endpgm", "s_setprio",
                    "s_sleep", "s_sendmsg", "s_trap", "s_sethalt", "s_icache_inv", "s_incperflevel",
                    "s_decperflevel", "s_ttracedata", "s_setkill", "s_sched_", "s_wakeup")


@dataclass(frozen=True)
class Instruction:
    line: int  # 1-based line in the lines given to parse (one function's)
    text: str  # without comment, whitespace collapsed

    @property
    def op(self) -> str:
        return self.text.split(None, 1)[0]

    @property
    def operands(self) -> list[str]:
        rest = self.text.split(None, 1)[1] if " " in self.text else ""
        return [t for t in re.split(r"[\s,]+", rest) if t]


def is_mfma(ins: Instruction) -> bool:
    return ins.op.startswith(("v_mfma", "v_smfmac"))


def is_dma(ins: Instruction) -> bool:
    """An async global->LDS load (the ``lds`` modifier of a buffer/global load)."""
    op = ins.op
    if not op.startswith(("buffer_load", "global_load")):
        return False
    return "lds" in ins.operands or "_lds_" in op or op.endswith("_lds")


def is_branch(ins: Instruction) -> bool:
    return ins.op == "s_branch" or ins.op.startswith(("s_cbranch", "s_setpc"))


def is_salu(ins: Instruction) -> bool:
    op = ins.op
    return op.startswith("s_") and not op.startswith(_SMEM_PREFIXES) and not op.startswith(_PROGRAM_CONTROL)


def wait_fields(ins: Instruction) -> dict[str, int]:
    """``{'vmcnt': 8, 'lgkmcnt': 0}`` for an ``s_waitcnt`` (empty for anything else)."""
    if ins.op != "s_waitcnt":
        return {}
    return {k: int(v) for k, v in _WAIT_FIELD_RE.findall(ins.text)}


def functions(isa_lines: Iterable[str]) -> list[tuple[Optional[str], list[str]]]:
    """``(name, lines)`` of every function in the listing: from the label a ``.type
    NAME,@function`` names to its ``.Lfunc_end*`` (a listing without ``.type``, such as a
    hand-written snippet, is one function from its first line). Reading stops where the code
    object's metadata starts (``.amdgpu_metadata`` or ``---``)."""
    lines = list(isa_lines)
    typed = {m.group(1) for ln in lines for m in [_TYPE_RE.match(ln)] if m}
    out: list[tuple[Optional[str], list[str]]] = []
    name: Optional[str] = None
    body: Optional[list[str]] = None if typed else []
    for raw in lines:
        if _META_RE.match(raw):
            break
        if body is None:
            m = _LABEL_RE.match(raw)
            if m and m.group(1) in typed:
                name, body = m.group(1), []
            continue
        if _END_RE.match(raw):
            out.append((name, body))
            name, body = None, None
            continue
        body.append(raw)
    if body:
        out.append((name, body))
    return out


def parse(isa_lines: Iterable[str]) -> tuple[list[Instruction], dict[str, int]]:
    """(instructions, label -> index of the instruction it names) of one function's lines."""
    instrs: list[Instruction] = []
    labels: dict[str, int] = {}
    for lineno, raw in enumerate(isa_lines, 1):
        line = raw.split(";", 1)[0].split("//", 1)[0].rstrip()
        if not line.strip():
            continue
        if _END_RE.match(line) or _META_RE.match(line):
            break
        m = _LABEL_RE.match(line)
        if m and not line[0].isspace():
            labels[m.group(1)] = len(instrs)
            continue
        text = " ".join(line.split())
        if text.startswith("."):
            continue
        instrs.append(Instruction(lineno, text))
    return instrs, labels


@dataclass
class _Block:
    start: int
    end: int  # exclusive
    succs: list[int]


def _blocks(instrs: list[Instruction], labels: dict[str, int]) -> tuple[list[_Block], dict[int, int]]:
    leaders = {0} | {i for i in labels.values() if i < len(instrs)}
    for i, ins in enumerate(instrs):
        if (is_branch(ins) or ins.op == "s_endpgm") and i + 1 < len(instrs):
            leaders.add(i + 1)
    starts = sorted(leaders)
    block_of = {s: b for b, s in enumerate(starts)}
    blocks = []
    for b, s in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(instrs)
        last = instrs[end - 1]
        succs: list[int] = []
        target = last.operands[0] if last.operands else None
        falls = b + 1 < len(starts)
        if last.op == "s_branch":
            if target in labels and labels[target] in block_of:
                succs.append(block_of[labels[target]])
        elif last.op.startswith("s_cbranch"):
            if target in labels and labels[target] in block_of:
                succs.append(block_of[labels[target]])
            if falls:
                succs.append(b + 1)
        elif last.op in ("s_endpgm",) or last.op.startswith("s_setpc"):
            pass
        elif falls:
            succs.append(b + 1)
        blocks.append(_Block(s, end, sorted(set(succs))))
    return blocks, block_of


def _dominators(blocks: list[_Block]) -> list[set[int]]:
    n = len(blocks)
    preds: list[list[int]] = [[] for _ in range(n)]
    for b, blk in enumerate(blocks):
        for s in blk.succs:
            preds[s].append(b)
    reachable, stack = {0}, [0]
    while stack:
        for s in blocks[stack.pop()].succs:
            if s not in reachable:
                reachable.add(s)
                stack.append(s)
    dom = [set(reachable) if b in reachable else set() for b in range(n)]  # unreachable: no loop
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in sorted(reachable - {0}):
            ps = [dom[p] for p in preds[b] if p in reachable]
            new = (set.intersection(*ps) if ps else set()) | {b}
            if new != dom[b]:
                dom[b] = new
                changed = True
    return dom


@dataclass(frozen=True)
class Loop:
    header: int  # block index
    blocks: tuple[int, ...]  # block indices, address order
    instructions: tuple[Instruction, ...]  # loop order (header's block first)
    header_label: Optional[str]
    function: Optional[str] = None


def loops(isa_lines: Iterable[str]) -> list[Loop]:
    """Every natural loop of every function in the listing, in address order."""
    return [lp for name, lines in functions(isa_lines) for lp in _function_loops(name, lines)]


def _function_loops(name: Optional[str], lines: list[str]) -> list[Loop]:
    instrs, labels = parse(lines)
    if not instrs:
        return []
    blocks, _ = _blocks(instrs, labels)
    dom = _dominators(blocks)
    preds: list[list[int]] = [[] for _ in blocks]
    for b, blk in enumerate(blocks):
        for s in blk.succs:
            preds[s].append(b)
    bodies: dict[int, set[int]] = {}
    for u, blk in enumerate(blocks):
        for h in blk.succs:
            if h in dom[u]:  # back edge u -> h
                body = bodies.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(preds[x])
    name_of = {i: label for label, i in labels.items()}
    out = []
    for h in sorted(bodies):
        order = sorted(bodies[h])
        k = order.index(h)
        rotated = order[k:] + order[:k]
        seq = tuple(ins for b in rotated for ins in instrs[blocks[b].start:blocks[b].end])
        out.append(Loop(h, tuple(order), seq, name_of.get(blocks[h].start), name))
    return out


def main_loop(isa_lines: Iterable[str]) -> Optional[Loop]:
    """The innermost loop with the most MFMAs (None when no loop holds one)."""
    found = [lp for lp in loops(isa_lines) if any(map(is_mfma, lp.instructions))]
    inner = [lp for lp in found
             if not any(o is not lp and o.function == lp.function and set(o.blocks) < set(lp.blocks)
                        for o in found)]
    if not inner:
        return None
    return max(inner, key=lambda lp: (sum(map(is_mfma, lp.instructions)), -len(lp.instructions)))


@dataclass(frozen=True)
class LoopMetrics:
    """One iteration of the main loop; ``per_tile`` normalises a count to one K tile."""

    header: Optional[str]
    instructions: int
    mfma: int
    dma: int
    dma_between: int
    waits: tuple[str, ...]
    vmcnt: tuple[int, ...]
    lgkmcnt: tuple[int, ...]
    barriers: int
    branches: int
    salu: int
    longest_mfma_free: int
    tiles: float  # K tiles one iteration covers

    @property
    def extra_branches(self) -> int:
        """Branches besides the one that closes the loop."""
        return max(0, self.branches - 1)

    @property
    def drains_vmcnt(self) -> bool:
        """A ``vmcnt(0)`` somewhere in the loop."""
        return 0 in self.vmcnt

    def per_tile(self, count: float) -> float:
        return count / self.tiles if self.tiles else float("nan")

    def summary(self) -> str:
        """One compact line (the schedule goldens)."""
        t = self.per_tile
        return (f"{self.tiles:g} tile(s)/iter; per tile mfma {t(self.mfma):g}, dma {t(self.dma):g} "
                f"({t(self.dma_between):g} between mfma), vmcnt [{','.join(map(str, self.vmcnt))}], "
                f"lgkmcnt x{len(self.lgkmcnt)}, barrier {t(self.barriers):g}, branches {self.extra_branches}+1, "
                f"salu {t(self.salu):g}; mfma-free run {self.longest_mfma_free}, loop {self.instructions} instrs")


def _longest_gap(flags: list[bool]) -> int:
    """Longest run of False in a cyclic sequence (all of it when nothing is True)."""
    n = len(flags)
    hits = [i for i, f in enumerate(flags) if f]
    if not hits:
        return n
    gaps = [hits[j + 1] - hits[j] - 1 for j in range(len(hits) - 1)]
    gaps.append(n - hits[-1] - 1 + hits[0])
    return max(gaps)


def metrics_of(loop: Loop, mfma_per_tile: Optional[float] = None) -> LoopMetrics:
    seq = loop.instructions
    mf = [is_mfma(i) for i in seq]
    first = mf.index(True) if any(mf) else len(seq)
    last = len(mf) - 1 - mf[::-1].index(True) if any(mf) else -1
    dmas = [j for j, i in enumerate(seq) if is_dma(i)]
    waits = [i for i in seq if i.op == "s_waitcnt"]
    fields = [wait_fields(i) for i in waits]
    mfma = sum(mf)
    tiles = mfma / mfma_per_tile if mfma_per_tile else 1.0
    return LoopMetrics(
        header=loop.header_label,
        instructions=len(seq),
        mfma=mfma,
        dma=len(dmas),
        dma_between=sum(1 for j in dmas if first < j < last),
        waits=tuple(i.text.split(None, 1)[1] if " " in i.text else "" for i in waits),
        vmcnt=tuple(f["vmcnt"] for f in fields if "vmcnt" in f),
        lgkmcnt=tuple(f["lgkmcnt"] for f in fields if "lgkmcnt" in f),
        barriers=sum(1 for i in seq if i.op == "s_barrier"),
        branches=sum(map(is_branch, seq)),
        salu=sum(map(is_salu, seq)),
        longest_mfma_free=_longest_gap(mf),
        tiles=tiles,
    )


def loop_metrics(isa_lines: Iterable[str], mfma_per_tile: Optional[float] = None) -> Optional[LoopMetrics]:
    """Metrics of the main K loop (None when the kernel has no loop with an MFMA)."""
    loop = main_loop(list(isa_lines))
    return None if loop is None else metrics_of(loop, mfma_per_tile)


def mfma_per_k_tile(block_m: int, block_n: int, block_k: int, waves: int, mma=(16, 16, 32)) -> float:
    """MFMAs one wave issues per K tile of a ``block_m x block_n x block_k`` workgroup tile."""
    m, n, k = mma
    return (block_m // m) * (block_n // n) * (block_k // k) / waves


# -- what the side-by-side report (benchmarks/isa_compare.py) reads besides LoopMetrics --------

_SCALED_FORMATS = {0: "fp8", 1: "bf8", 2: "fp6", 3: "bf6", 4: "fp4"}
_BYTES_SUFFIX_RE = re.compile(r"_b(\d+)")
_VMEM_BYTES = {"dwordx4": 16, "dwordx3": 12, "dwordx2": 8, "dword": 4, "short": 2, "ushort": 2, "sshort": 2,
               "ubyte": 1, "sbyte": 1, "byte": 1}


def mfma_kind(ins: Instruction) -> str:
    """The MFMA's mnemonic, and for a scaled MFMA (``v_mfma_scale_*_f8f6f4``) its operand formats
    from ``cbsz`` (A) and ``blgp`` (B): 0 fp8 (the default when absent), 1 bf8, 2 fp6, 3 bf6, 4 fp4,
    e.g. ``v_mfma_scale_f32_16x16x128_f8f6f4 fp4xfp4``."""
    if "f8f6f4" not in ins.op:
        return ins.op
    fields = dict(re.findall(r"\b(cbsz|blgp):(\d+)", ins.text))
    a, b = (_SCALED_FORMATS.get(int(fields.get(f, 0)), f"fmt{fields.get(f)}") for f in ("cbsz", "blgp"))
    return f"{ins.op} {a}x{b}"


def lds_bytes_per_lane(ins: Instruction) -> int:
    """Bytes one lane moves through LDS for a ``ds_read*`` / ``ds_write*`` (``ds_read2*``: two
    elements), 0 for anything else."""
    if not ins.op.startswith(("ds_read", "ds_write", "ds_load", "ds_store")):
        return 0
    m = _BYTES_SUFFIX_RE.search(ins.op)
    size = int(m.group(1)) // 8 if m else 4
    if ins.op.startswith(("ds_read_u8", "ds_read_i8", "ds_write_b8")):
        size = 1
    elif ins.op.startswith(("ds_read_u16", "ds_read_i16")):
        size = 2
    return size * (2 if "2" in ins.op.split("_")[1] else 1)


def vmem_bytes_per_lane(ins: Instruction) -> int:
    """Bytes one lane loads for a ``buffer_load_*`` / ``global_load_*`` (DMA or not), 0 otherwise."""
    if not ins.op.startswith(("buffer_load", "global_load")):
        return 0
    tail = ins.op.split("_", 2)[-1].replace("lds_", "")
    return _VMEM_BYTES.get(tail, 4)


def wave_group_loops(isa_lines: Iterable[str]) -> Optional[tuple[Loop, Loop]]:
    """``(leading, lagging)`` when the main loop's function runs its waves as two groups with a
    loop each (the plugin's MX ping-pong kernel): exactly two innermost MFMA loops with the same
    MFMA count, neither reachable only through the other (a scalar branch picks one per wave),
    one of them entered past one ``s_barrier`` more than the other (barriers outside every loop
    in blocks that dominate its header but not the other's), so its n-th loop barrier meets the
    other's (n+1)-th. None otherwise."""
    lines = list(isa_lines)
    loop = main_loop(lines)
    if loop is None:
        return None
    body = next(b for name, b in functions(lines) if name == loop.function)
    all_loops = _function_loops(loop.function, body)
    mfma_loops = [lp for lp in all_loops if any(map(is_mfma, lp.instructions))]
    inner = [lp for lp in mfma_loops if not any(o is not lp and set(o.blocks) < set(lp.blocks) for o in mfma_loops)]
    if len(inner) != 2:
        return None
    x, y = inner
    if sum(map(is_mfma, x.instructions)) != sum(map(is_mfma, y.instructions)) or set(x.blocks) & set(y.blocks):
        return None
    instrs, labels = parse(body)
    blocks, _ = _blocks(instrs, labels)
    dom = _dominators(blocks)
    if x.header in dom[y.header] or y.header in dom[x.header]:
        return None
    in_loop = {b for lp in all_loops for b in lp.blocks}

    def approach_barriers(lp: Loop, other: Loop) -> int:
        return sum(1 for b in dom[lp.header] - dom[other.header] if b not in in_loop
                   for ins in instrs[blocks[b].start:blocks[b].end] if ins.op == "s_barrier")

    bx, by = approach_barriers(x, y), approach_barriers(y, x)
    if abs(bx - by) != 1:
        return None
    return (x, y) if bx < by else (y, x)


def skippable_barriers_before_loop(isa_lines: Iterable[str]) -> int:
    """``s_barrier`` instructions in the main loop's function, before its header, that an
    lane-mask branch (``s_cbranch_execz/execnz/vccz/vccnz`` ending the block just above) jumps
    over and that do not dominate the header: a per-lane (so per-wave) condition lets some
    waves pass them and others skip them on their way into the loop, which runs the waves as two
    groups a barrier apart (the in-tree HTI kernels). A barrier that a scalar branch skips
    (``s_cbranch_scc*``: the same for every wave, e.g. a persistent kernel's first tile) or that
    sits in another loop does not count."""
    lines = list(isa_lines)
    loop = main_loop(lines)
    if loop is None:
        return 0
    body = next(b for name, b in functions(lines) if name == loop.function)
    instrs, labels = parse(body)
    blocks, block_of = _blocks(instrs, labels)
    dom = _dominators(blocks)
    header_dom = dom[loop.header]
    mine = set(loop.blocks)
    others = [set(lp.blocks) for lp in _function_loops(loop.function, body) if not mine <= set(lp.blocks)]

    def exec_skipped(b: int) -> bool:
        if b == 0:
            return False
        last = instrs[blocks[b - 1].end - 1]
        target = last.operands[0] if last.operands else None
        return (last.op.startswith(("s_cbranch_exec", "s_cbranch_vcc")) and target in labels
                and block_of.get(labels[target], -1) > b)

    return sum(1 for b, blk in enumerate(blocks)
               if b < min(loop.blocks) and b not in header_dom and dom[b] and not any(b in o for o in others)
               and exec_skipped(b)
               for ins in instrs[blk.start:blk.end] if ins.op == "s_barrier")
