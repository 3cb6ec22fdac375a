"""The TopK family's two kernels, read from their gfx950 assembly, and a stated MI355X model of
one call of each: the register kernel (k <= 16: a wave per row) against the radix kernel (a
workgroup per row, 4 histogram passes, count, place, a bitonic sort of k_pad survivors).
Static evidence only: nothing here runs a kernel; every constant of the model is printed.

    python benchmarks/topk_model.py [--dtypes fp32,bf16] [--ks 1,2,4,8,16] [--ns 4096,32768]
        [--rows 64,1024,16384] [--isa-dir DIR]

What is read from the ISA (``torch_flydsl.runtime.isa``: functions, parse, loops):

* **register**: the streaming loop (the innermost loop holding the 16-byte ``buffer_load``s):
  its instructions on the path where no chunk is merged (``skip``: every ``s_cbranch_execz``
  taken) and the instructions of each merge region (from an ``s_cbranch_execz`` to its label),
  per 16-byte chunk; the instructions outside every loop (the butterfly merge and the store: once
  per row).
* **radix**: every innermost loop that loads from the row (4 histogram passes, count, place;
  LLVM unrolls them, so a loop's cycles are divided by its loads, one element each, and the
  one-element remainder loops are left out); the row loop's instructions outside them (scans,
  digit picks, the bitonic network over k_pad, barriers: once per row).

Issue cycles per wave instruction: VALU 4 (a wave64 on a 16-lane SIMD), LDS atomics
``LDS_ATOMIC`` (address conflicts of a 256-bin histogram), other LDS and VMEM 4, SALU 1,
``s_nop N`` N+1, waits and barriers 0 (latency below). How often a register chunk is merged is
simulated (numpy) on normal random rows with the kernel's own rule (a lane merges a chunk when
one of its keys reaches the wave's threshold, refreshed once per loop step; a wave pays the
merge when any lane needs it), and for the worst case (ascending rows: every chunk merges).

Time of one call = LAUNCH + max(issue, memory, chain):

* issue: all waves' issue cycles over ``CUS * SIMDS`` SIMDs at ``CLOCK``;
* memory: the row bytes once from HBM, plus, for radix, its 5 further reads of every row from
  the last-level caches (``LLC_BW``);
* chain: a wave's dependent loop iterations (register: loads one step ahead, so a step costs
  ``max(HBM_LAT, its issue cycles)``; radix: each iteration waits for its loads: ``HBM_LAT`` for a first
  read, ``LLC_LAT`` for a re-read; one wait per loop iteration, which issues all its loads
  first) plus its issue cycles, times the rounds of resident rows
  (VGPR-limited waves per SIMD, ``MAX_WAVES``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch_flydsl.runtime import isa  # noqa: E402

CLOCK = 2.4e9  # Hz, MI355X
CUS, SIMDS, MAX_WAVES, VGPRS_PER_LANE = 256, 4, 8, 512
HBM_BW, LLC_BW = 8.0e12, 14.0e12  # bytes/s: HBM3E; L2 + Infinity Cache re-reads
HBM_LAT, LLC_LAT = 2000, 800  # cycles a wave waits for a load (first read / re-read)
LDS_ATOMIC = 16  # cycles per wave ds_add (bank conflicts of random digits)
LAUNCH = 2.0e-6  # s, the same for both
CONSTANTS = dict(CLOCK=CLOCK, CUS=CUS, SIMDS=SIMDS, MAX_WAVES=MAX_WAVES, HBM_BW=HBM_BW, LLC_BW=LLC_BW,
                 HBM_LAT=HBM_LAT, LLC_LAT=LLC_LAT, LDS_ATOMIC=LDS_ATOMIC, LAUNCH=LAUNCH)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_NOP = re.compile(r"s_nop\s+(\d+)")


def cycles(ins: isa.Instruction) -> int:
    op = ins.op
    if op.startswith("s_nop"):
        m = _NOP.match(ins.text)
        return int(m.group(1)) + 1 if m else 1
    if op.startswith(("s_waitcnt", "s_barrier")):
        return 0
    if op.startswith(("ds_add", "ds_inc", "ds_max", "ds_min")):
        return LDS_ATOMIC
    if op.startswith(("v_", "ds_", "buffer_", "global_")):
        return 4
    return 1  # SALU, branches, scalar loads


def total(instrs) -> int:
    return sum(map(cycles, instrs))


def compile_isa(alg: str, dtype, k: int, n: int, dump_dir: Path):
    """``(config, compiled kernel, ISA lines)`` for the family's ``alg`` config of [64, n], k."""
    from torch_flydsl.runtime.compile import compile_gfx950
    from torch_flydsl.templates.topk.config import radix_for, register_for
    from torch_flydsl.templates.topk.launcher import allocate, checked_problem, compile_args

    x = torch.empty(64, n, dtype=dtype)  # CPU stand-in, never launched
    p = checked_problem(x, k, -1, True, True, False)
    cfg = register_for(p) if alg == "register" else radix_for(p)
    jit_fn, args = compile_args(cfg, p, x, *allocate(x, p))
    os.environ.update(FLYDSL_DUMP_IR="1", FLYDSL_DUMP_DIR=str(dump_dir))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ck = compile_gfx950(jit_fn, *args)
    finally:
        os.environ.pop("FLYDSL_DUMP_IR", None)
        os.environ.pop("FLYDSL_DUMP_DIR", None)
    (f,) = Path(dump_dir).glob("**/*final_isa.s")
    return cfg, ck.kernels[0], f.read_text().splitlines()


def _inner(lps):
    return [lp for lp in lps if not any(o is not lp and set(o.blocks) < set(lp.blocks) for o in lps)]


def _loads_row(lp) -> bool:
    return any(i.op.startswith(("buffer_load", "global_load")) for i in lp.instructions)


@dataclass
class RegisterCost:
    chunks_per_step: int
    skip_per_step: int  # cycles of one loop step with no merge
    merge_per_chunk: float  # cycles of one chunk's merge region
    per_row: int  # cycles outside every loop (setup, butterfly, store)


def register_cost(lines) -> RegisterCost:
    (name, body), = isa.functions(lines)
    instrs, labels = isa.parse(body)
    lps = isa.loops(lines)
    main = max(_inner([lp for lp in lps if _loads_row(lp)]),
               key=lambda lp: sum(i.op.startswith("buffer_load") for i in lp.instructions))
    index = {ins.line: j for j, ins in enumerate(instrs)}
    lines_in = {i.line for i in main.instructions}
    regions = []
    for ins in main.instructions:
        if ins.op == "s_cbranch_execz":
            start, end = index[ins.line] + 1, labels[ins.operands[0]]
            region = [i for i in instrs[start:end] if i.line in lines_in]
            if region:
                regions.append(region)
    merged = {i.line for r in regions for i in r}
    skip = total(i for i in main.instructions if i.line not in merged)
    in_loops = {i.line for lp in lps for i in lp.instructions}
    outside = total(i for i in instrs if i.line not in in_loops)
    chunks = sum(i.op.startswith("buffer_load") for i in main.instructions)
    return RegisterCost(chunks, skip, sum(map(total, regions)) / max(len(regions), 1), outside)


@dataclass
class RadixCost:
    passes: tuple  # (cycles per element per thread, elements per iteration) of each streaming loop
    per_row: int  # cycles per row outside the streaming loops (scans, sort, barriers)
    barriers: int

    @property
    def per_element(self) -> float:
        return sum(c for c, _ in self.passes)


def radix_cost(lines) -> RadixCost:
    """LLVM unrolls each streaming loop (4 elements per iteration for the histogram and count
    loops) and adds a one-element remainder loop after it: a loop of one load right after a
    loop of several is that remainder (it runs fewer than ``unroll`` times per row) and not a pass."""
    lps = isa.loops(lines)
    inner = sorted(_inner([lp for lp in lps if _loads_row(lp)]), key=lambda lp: lp.instructions[0].line)

    def loads(lp):
        return sum(i.op.startswith(("buffer_load", "global_load")) for i in lp.instructions)

    main = [lp for j, lp in enumerate(inner) if not (loads(lp) == 1 and j and loads(inner[j - 1]) > 1)]
    stream_lines = {i.line for lp in inner for i in lp.instructions}
    row = max(lps, key=lambda lp: len(lp.instructions))
    rest = [i for i in row.instructions if i.line not in stream_lines]
    barriers = sum(i.op == "s_barrier" for i in rest)
    passes = tuple((total(lp.instructions) / loads(lp), loads(lp)) for lp in main)
    return RadixCost(passes, total(rest), barriers)


def merge_fraction(n: int, vec: int, kp: int, unroll: int, rows: int, ascending: bool, seed: int = 0) -> float:
    """The fraction of (wave, chunk) pairs where some lane merges, by the kernel's rule, on
    normal random rows (or ascending ones): lane ``l`` of chunk ``c`` holds elements
    ``(c * 64 + l) * vec ...``; the threshold is the larger of the max over lanes of their
    kp-th best and the kp-th largest of the lanes' best, refreshed after every ``unroll`` chunks."""
    rng = np.random.default_rng(seed)
    step = 64 * vec
    chunks = -(-n // step)
    taken = total_ = 0
    for _ in range(rows):
        x = np.arange(n, dtype=np.float64) if ascending else rng.standard_normal(n)
        pad = np.full(chunks * step, -np.inf)
        pad[:n] = x
        c = pad.reshape(chunks, 64, vec)
        best = np.full((64, kp), -np.inf)
        t = -np.inf
        for i in range(chunks):
            need = c[i].max(axis=1) >= t
            taken += bool(need.any())
            total_ += 1
            both = np.concatenate([best, np.where(need[:, None], c[i], -np.inf)], axis=1)
            best = -np.sort(-both, axis=1)[:, :kp]
            if (i + 1) % unroll == 0:  # the kernel's threshold (register_kernel.threshold)
                t = max(best[:, -1].max(), np.sort(best[:, 0])[::-1][kp - 1] if kp <= 64 else -np.inf)
    return taken / total_


def resident_rows(vgpr: int, waves_per_row: int) -> int:
    granule = max(8, -(-vgpr // 8) * 8)
    waves = min(MAX_WAVES, VGPRS_PER_LANE // granule)
    return CUS * SIMDS * waves // waves_per_row


def model_register(c: RegisterCost, vgpr: int, rows: int, n: int, ebytes: int, vec: int, frac: float) -> float:
    step_elems = 64 * vec * c.chunks_per_step
    steps = -(-n // step_elems)
    per_step = c.skip_per_step + frac * c.chunks_per_step * c.merge_per_chunk
    wave_cycles = steps * per_step + c.per_row
    issue = rows * wave_cycles / (CUS * SIMDS) / CLOCK
    memory = rows * n * ebytes / HBM_BW
    rounds = -(-rows // resident_rows(vgpr, 1))
    # one step of prefetch: a step waits for its loads or for the previous step's work
    chain = rounds * (HBM_LAT + steps * max(HBM_LAT, per_step) + c.per_row) / CLOCK
    return LAUNCH + max(issue, memory, chain)


def model_radix(c: RadixCost, vgpr: int, threads: int, rows: int, n: int, ebytes: int) -> float:
    waves = threads // 64
    iters = -(-n // threads)  # elements per thread per pass
    wave_cycles = iters * c.per_element + c.per_row
    issue = rows * waves * wave_cycles / (CUS * SIMDS) / CLOCK
    reads = len(c.passes)
    memory = rows * n * ebytes / HBM_BW + (reads - 1) * rows * n * ebytes / LLC_BW
    rounds = -(-rows // resident_rows(vgpr, waves))
    waits = sum(-(-iters // per) * (HBM_LAT if j == 0 else LLC_LAT) for j, (_, per) in enumerate(c.passes))
    chain = rounds * (waits + wave_cycles) / CLOCK
    return LAUNCH + max(issue, memory, chain)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--ks", default="1,2,4,8,16")
    ap.add_argument("--ns", default="4096,32768")
    ap.add_argument("--rows", default="64,1024,16384")
    ap.add_argument("--isa-dir", default=None, help="keep the ISA listings here (default: a temp dir)")
    args = ap.parse_args(argv)
    from torch_flydsl.templates.topk.register_kernel import UNROLL

    ks = [int(v) for v in args.ks.split(",")]
    ns = [int(v) for v in args.ns.split(",")]
    rows_list = [int(v) for v in args.rows.split(",")]
    print("topk_model: MI355X constants " + " ".join(f"{k}={v:g}" for k, v in CONSTANTS.items()))
    root = Path(args.isa_dir or tempfile.mkdtemp(prefix="topk_model_"))
    seen: dict = {}
    table = []
    worst = True
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        vec = 16 // dtype.itemsize
        for n in ns:
            for k in ks:
                got = {}
                for alg in ("register", "radix"):
                    from torch_flydsl.templates.topk.config import radix_for, register_for
                    from torch_flydsl.templates.topk.launcher import checked_problem

                    p = checked_problem(torch.empty(64, n, dtype=dtype), k, -1, True, True, False)
                    want = register_for(p) if alg == "register" else radix_for(p)
                    key = (dname, want.key())
                    if key not in seen:
                        cfg, kr, lines = compile_isa(alg, dtype, k, n, root / f"{dname}_{want.key()}")
                        cost = register_cost(lines) if alg == "register" else radix_cost(lines)
                        seen[key] = (cfg, kr, cost)
                        print(f"  {dname} {cfg.key()}: vgpr={kr.vgpr} lds={kr.lds_bytes} {cost}")
                    got[alg] = seen[key]
                (rcfg, rkr, rc), (xcfg, xkr, xc) = got["register"], got["radix"]
                kp = rcfg.k_pad
                frac = merge_fraction(n, vec, kp, UNROLL, 2, False)
                frac_worst = merge_fraction(min(n, 4096), vec, kp, UNROLL, 1, True)
                for rows in rows_list:
                    t_reg = model_register(rc, rkr.vgpr, rows, n, dtype.itemsize, vec, frac)
                    t_reg_worst = model_register(rc, rkr.vgpr, rows, n, dtype.itemsize, vec, frac_worst)
                    t_rad = model_radix(xc, xkr.vgpr, xcfg.threads, rows, n, dtype.itemsize)
                    table.append((dname, rows, n, k, frac, t_reg, t_reg_worst, t_rad))
                    if k <= 8 and n in (4096, 32768) and not t_reg < t_rad:
                        worst = False
    print()
    print(f"{'dtype':>5} {'rows':>6} {'N':>6} {'k':>3} {'merge%':>7} {'register us':>12} "
          f"{'(ascending)':>12} {'radix us':>10} {'radix/register':>15}")
    for dname, rows, n, k, frac, t_reg, t_worst, t_rad in table:
        print(f"{dname:>5} {rows:>6} {n:>6} {k:>3} {100 * frac:>6.1f}% {t_reg * 1e6:>12.2f} {t_worst * 1e6:>12.2f} "
              f"{t_rad * 1e6:>10.2f} {t_rad / t_reg:>14.2f}x")
    verdict = "faster" if worst else "NOT faster"
    print(f"\nmodelled: the register kernel is {verdict} than radix for every k <= 8 at N = 4096 and 32768 "
          "(random rows)")
    return 0 if worst else 1


if __name__ == "__main__":
    sys.exit(main())
