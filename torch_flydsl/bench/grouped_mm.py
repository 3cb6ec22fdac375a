"""Time the grouped GEMM family on an MI350 (gfx950): every curated FlyDSL config that fits,
against PyTorch's ``torch._grouped_mm`` and (where Inductor offers it) Inductor's Triton grouped
template, on MoE expert projections with balanced and skewed routing.

    python benchmarks/grouped_gemm_device_bench.py [--models mixtral,qwen3] [--routings balanced,zipf,empty]
        [--tokens 512,16384] [--b-major col,row] [--dtype bf16|fp16] [--via launcher|launch|op] [--no-triton]
        [--warmup 10] [--iters 50] [--flush-l2] [--no-check] [--out grouped_gemm_bench]
    python benchmarks/grouped_gemm_device_bench.py --dry-run     # the cases and their configs; any machine
    python -m torch_flydsl bench grouped_mm [--shapes seed|FILE] [--out DIR]   # the installed command

(this module holds the suite; ``benchmarks/grouped_gemm_device_bench.py`` is its script entry
point. A shape file describes each case by its MoE dimensions: see ``BENCH.fields``. Through
``python -m torch_flydsl bench`` each case also gets, where vLLM imports, a vLLM column: vLLM's
fused-MoE Triton kernel as ``TritonExperts`` runs it (``bench.vllm_columns``), which ``--table``
judges grouped_mm entries against: ``table_picks``.)

The problem: ``torch._grouped_mm(a, b, offs=offs)``'s MoE forward. ``tokens`` tokens each go to
``top_k`` experts, so A ``[T, K]`` holds ``T = tokens * top_k`` rows sorted by expert, B is
``[G, K, N]`` (one weight per expert; ``--b-major col``, the default, stores each ``[N, K]``,
the usual ``nn.Linear`` layout; ``row`` stores ``[K, N]``), ``offs`` int32 ``[G]`` on the device.

Cases (expert count, top-k, hidden H, expert intermediate I; shapes of these public models):

    mixtral   8 experts, top-2, H 4096, I 14336   (Mixtral-8x7B-style)
    phi       16 experts, top-2, H 4096, I 6400   (Phi-3.5-MoE-style)
    gptoss    32 experts, top-4, H 2880, I 2880   (gpt-oss-20b-style; K=2880 fits no block_k=128 config)
    olmoe     64 experts, top-8, H 2048, I 1024   (OLMoE-style)
    qwen3     128 experts, top-8, H 4096, I 1536  (Qwen3-235B-A22B-style)

each with two projections, ``gate_up`` (N = 2I, K = H: gate and up fused) and ``down`` (N = H,
K = I), at 512, 2048, 8192 and 16384 tokens, under three routings of the T rows:

    balanced  every expert gets T/G rows (the remainder one row each to the first experts)
    zipf      expert of rank r gets a share proportional to 1/r^1.2 (ranks shuffled with a fixed seed)
    empty     every 4th expert gets no row, the others share T evenly (the last expert is empty
              when G is a multiple of 4: offsets end on a repeated value)

120 cases per expert-weight major. ``--models``, ``--routings`` and ``--tokens`` select a subset.

Timed: FlyDSL, every curated config that fits (``family.configs_for``), through the launcher with
the compiled kernel and its packed arguments reused (``--via launch``: the public
``grouped_gemm.launch(cfg, a, b, offs, out)`` per call, with its operand checks; ``--via op``:
``torch.ops.torch_flydsl.grouped_mm_out`` under ``ops.strict()``, what Inductor's generated code
calls); the fastest correct one is reported, and also the config that won the same shape under
balanced routing, timed under this routing (Inductor autotunes with evenly spaced offsets, so
that is the config a compiled model would run). ATen: ``torch._grouped_mm``. Triton:
``torch.compile(lambda a, b, offs: torch._grouped_mm(a, b, offs=offs),
mode="max-autotune-no-cudagraphs")`` with ``max_autotune_gemm_backends="TRITON"``, compiled per
case; when Inductor offers no Triton template here (its grouped template needs a device and
torch it supports) the column is left empty and the reason printed once (``--no-triton`` skips it).

Timing: ``torch.cuda.Event`` around ``--iters`` back-to-back calls after ``--warmup`` (ATen and
Triton allocate their output each call, FlyDSL writes a preallocated one); with ``--flush-l2``, a
512 MiB buffer is zeroed before each call and the median single call is taken. Correctness
(unless ``--no-check``), before any timing: every result against the float64 per-group product
computed on the device; a config whose max error exceeds 2^-7 max|ref| is reported and never
picked. TFLOP/s count ``2 * T * N * K``.

Prints a table and geometric-mean speedups (overall, per routing, per expert count), writes
``grouped_gemm_bench.csv`` (one row per case), ``grouped_gemm_bench_configs.csv`` (every config
timed) and, with matplotlib installed, ``grouped_gemm_bench.png`` into ``--out`` (it says when
matplotlib is missing). Without a ROCm gfx950 GPU it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..registry import family_for
from . import baselines, vllm_columns
from .baselines import TritonUnavailable
from .plots import plot_speedups, present
from .report import Baseline, geomean
from .shapes import Field
from .suite import Suite, plan_keys
from .tables import table, write_csv
from .timing import FLUSH_BYTES, check_and_time, device_gate, short_error, tflops, time_ms


@dataclass(frozen=True)
class Moe:
    experts: int
    top_k: int
    hidden: int
    inter: int
    like: str


MODELS = {
    "mixtral": Moe(8, 2, 4096, 14336, "Mixtral-8x7B"),
    "phi": Moe(16, 2, 4096, 6400, "Phi-3.5-MoE"),
    "gptoss": Moe(32, 4, 2880, 2880, "gpt-oss-20b"),
    "olmoe": Moe(64, 8, 2048, 1024, "OLMoE"),
    "qwen3": Moe(128, 8, 4096, 1536, "Qwen3-235B-A22B"),
    # issue 20's MoE forward (benchmarks/isa_shapes.py): gate_up is N = 2I = 4096, K = H = 2048
    "moe8x2048": Moe(8, 1, 2048, 2048, "issue 20's MoE forward"),
}
PROJECTIONS = ("gate_up", "down")
TOKENS = (512, 1024, 2048, 8192, 16384)
ROUTINGS = ("balanced", "zipf", "empty")
ZIPF_EXPONENT = 1.2
EMPTY_EVERY = 4
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ERROR_LIMIT = 2.0**-7  # max |out - ref| / max |ref| for a result to count


@dataclass(frozen=True)
class Case:
    model: str
    projection: str
    tokens: int
    routing: str
    spec: Optional[Moe] = None  # a model outside ``MODELS`` (from a shape file); ``model`` is its label

    @property
    def moe(self) -> Moe:
        return self.spec or MODELS[self.model]

    @property
    def groups(self) -> int:
        return self.moe.experts

    @property
    def rows(self) -> int:
        """T: rows of A, one per (token, chosen expert)."""
        return self.tokens * self.moe.top_k

    @property
    def n(self) -> int:
        return 2 * self.moe.inter if self.projection == "gate_up" else self.moe.hidden

    @property
    def k(self) -> int:
        return self.moe.hidden if self.projection == "gate_up" else self.moe.inter

    @property
    def shape_key(self) -> tuple:
        """The case up to its routing (cases that differ only in routing share it)."""
        return self.moe, self.projection, self.tokens

    def sizes(self) -> list[int]:
        return group_sizes(self.routing, self.rows, self.groups)

    def flops(self) -> int:
        return 2 * sum(self.sizes()) * self.n * self.k


def _apportion(total: int, weights: list[float]) -> list[int]:
    """Integer shares of ``total`` proportional to ``weights`` (largest remainder), summing to it."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def group_sizes(routing: str, rows: int, groups: int) -> list[int]:
    """Rows per expert under ``routing`` (see the module docstring); they sum to ``rows``."""
    if routing == "balanced":
        return _apportion(rows, [1.0] * groups)
    if routing == "zipf":
        ranks = list(range(1, groups + 1))
        random.Random(groups).shuffle(ranks)
        return _apportion(rows, [r ** -ZIPF_EXPONENT for r in ranks])
    if routing == "empty":
        return _apportion(rows, [0.0 if i % EMPTY_EVERY == EMPTY_EVERY - 1 else 1.0 for i in range(groups)])
    raise ValueError(f"unknown routing {routing!r} ({', '.join(ROUTINGS)})")


def suite(models=tuple(MODELS), routings=ROUTINGS, tokens=TOKENS) -> list[Case]:
    """Every case, a shape's balanced routing first (the "balanced pick" column needs it)."""
    order = sorted(routings, key=lambda r: ROUTINGS.index(r) if r in ROUTINGS else len(ROUTINGS))
    return [Case(m, p, t, r) for m in models for p in PROJECTIONS for t in tokens for r in order]


def offsets(sizes: list[int], device="cpu") -> torch.Tensor:
    """``offs``: int32 cumulative end row of each expert."""
    ends, total = [], 0
    for s in sizes:
        total += s
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def _family():
    return family_for("grouped_mm")


def problem_for(case: Case, b_major: str = "col", dtype: torch.dtype = torch.bfloat16):
    """The family's problem (or Decline) for one case."""
    return _family().explain_problem("grouped_mm", case.rows, case.n, case.k, dtype, groups=case.groups,
                                     b_major=b_major)


def candidates(problem, breadth: str = "curated") -> list:
    return _family().configs_for(problem, breadth)[0]


def operands(case: Case, b_major: str = "col", dtype: torch.dtype = torch.bfloat16, device="cpu") -> tuple:
    """``(a, b, offs, out)`` as ``torch._grouped_mm`` takes them; B scaled by 1/sqrt(K) so the
    products stay near 1 in fp16."""
    t, n, k, g = case.rows, case.n, case.k, case.groups
    a = torch.randn(t, k, dtype=dtype, device=device)
    if b_major == "col":
        b = torch.randn(g, n, k, dtype=dtype, device=device).mul_(k**-0.5).transpose(1, 2)
    else:
        b = torch.randn(g, k, n, dtype=dtype, device=device).mul_(k**-0.5)
    return a, b, offsets(case.sizes(), device), torch.empty(t, n, dtype=dtype, device=device)


def aten_fn(a, b, offs) -> Callable[[], torch.Tensor]:
    return lambda: torch._grouped_mm(a, b, offs=offs)


def flydsl_fn(via: str, cfg, problem, a, b, offs, out) -> Callable[[], torch.Tensor]:
    """One FlyDSL call into ``out`` (compiles on first use)."""
    if via == "launch":
        from torch_flydsl.templates.grouped_gemm import launch

        return lambda: launch(cfg, a, b, offs, out)
    if via == "op":
        from torch_flydsl import ops

        ops.register()
        op, key = ops.op("grouped_mm_out"), cfg.key()

        def call():
            with ops.strict():  # a fallback to PyTorch raises instead of being timed as FlyDSL
                op(a, b, offs, cfg=key, out=out)
            return out

        return call
    from torch_flydsl.runtime import kernel_cache
    from torch_flydsl.templates.grouped_gemm.launcher import compile_args

    jit_fn, args = compile_args(cfg, a, b, offs, out, torch.cuda.current_stream(a.device), problem=problem)
    compiled = kernel_cache.compiled_for(jit_fn, args, a.device)
    return lambda: (compiled(*args), out)[1]


def triton_fn(a, b, offs) -> Callable[[], torch.Tensor]:
    """Inductor's Triton grouped template alone, compiled for these operands; raises
    ``TritonUnavailable`` when the compiled code holds no Triton template kernel."""
    return baselines.triton_fn(lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), a, b, offs,
                               need_template=True, what="_grouped_mm")


def intree_fn(a, b, offs) -> Callable[[], torch.Tensor]:
    """torch's in-tree FlyDSL backend's grouped GEMM (Inductor, FLYDSL its only GEMM backend, the
    plugin deferring); raises ``baselines.IntreeUnavailable`` when it did not serve it."""
    return baselines.intree_compiled_fn(lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), a, b, offs,
                                        what="_grouped_mm")


def vllm_fn(case: Case, a, b) -> Callable[[], torch.Tensor]:
    """vLLM's fused-MoE Triton kernel for this expert GEMM (``bench.vllm_columns.moe_gemm_fn``):
    the experts as vLLM stores them, ``[G, N, K]`` (``b`` is their transpose, B col-major)."""
    moe = case.moe
    return vllm_columns.moe_gemm_fn(a, b.transpose(1, 2), case.sizes(), case.tokens, moe.top_k, moe.hidden,
                                    moe.inter)


def vllm_column(row: dict, notes: list, case: Case, b_major: str, a, b, ref, args, flush) -> None:
    """``vllm_ms`` (vLLM's fused-MoE Triton kernel on this case's rows; B col-major only: vLLM's
    experts are ``[G, N, K]``) and ``vllm_aiter_moe`` (whether vLLM would run AITER's fused MoE
    instead, which the plugin's re-route leaves alone)."""
    row["vllm_aiter_moe"] = vllm_columns.aiter_moe_on()
    if b_major != "col":
        notes.append("vLLM: not timed for row-major B (vLLM's experts are [G, N, K])")
        return
    entry = {}
    try:
        entry = _check_and_time(vllm_fn(case, a, b), ref, args, flush)
    except Exception as e:  # vLLM's kernel or its config lookup failed here
        entry["error"] = short_error(e)
    row.update(vllm_ms=entry.get("ms"), vllm_err=entry.get("err"))
    if "error" in entry:
        notes.append(f"vLLM: {entry['error']}")


def _routing_summary(sizes: list[int]) -> tuple[int, int, int]:
    return min(sizes), max(sizes), sum(1 for s in sizes if s == 0)


def dry_run(cases: list[Case], b_majors, dtype, breadth: str) -> int:
    from torch_flydsl.templates.base import Decline

    rows = []
    sets: dict[str, dict[tuple[str, ...], list[Case]]] = {bm: {} for bm in b_majors}
    for i, c in enumerate(cases):
        counts: list[int | str] = []
        for bm in b_majors:
            p = problem_for(c, bm, dtype)
            keys = () if isinstance(p, Decline) else tuple(cfg.key() for cfg in candidates(p, breadth))
            counts.append(f"declined: {p}" if isinstance(p, Decline) else len(keys))
            sets[bm].setdefault(keys, []).append(c)
        lo, hi, empty = _routing_summary(c.sizes())
        rows.append((i + 1, c.model, c.groups, c.moe.top_k, c.projection, c.tokens, c.rows, c.n, c.k, c.routing,
                     lo, hi, empty, round(c.flops() / 1e9, 1), *counts))
    print(f"{len(cases)} cases (torch._grouped_mm MoE forward: A[T,K] x B[G,K,N], T = tokens x top-k rows sorted "
          f"by expert; {str(dtype).replace('torch.', '')}), {breadth} configs that fit each:")
    print(table(rows, ["#", "model", "G", "top-k", "proj", "tokens", "T", "N", "K", "routing", "min rows",
                       "max rows", "empty", "GFLOP", *(f"B {bm}-major configs" for bm in b_majors)], floatfmt="g"))
    for bm in b_majors:
        for keys, where in sets[bm].items():
            shapes = sorted({f"{c.model} {c.projection} (N={c.n}, K={c.k})" for c in where})
            scope = "every case" if len(where) == len(cases) else "; ".join(shapes)
            print(f"\nB {bm}-major, {scope}: {', '.join(keys) or 'none'}")
    return 0


def _check_and_time(fn: Callable, ref, args, flush) -> dict:
    return check_and_time(fn, ref, args, flush, ERROR_LIMIT, time_ms)


def bench_case(case: Case, b_major: str, args, flush, config_rows: list, dev: torch.device, state: dict) -> dict:
    """One case: every fitting config's error and time (appended to ``config_rows``), the
    fastest correct one, the balanced-routing pick, ATen and Triton. ``state`` carries the
    balanced winners and Triton's availability from case to case."""
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.grouped_gemm import reference
    from torch_flydsl.templates.grouped_gemm.config import baseline_for

    dtype = DTYPES[args.dtype]
    lo, hi, empty = _routing_summary(case.sizes())
    row: dict[str, Any] = {"model": case.model, "G": case.groups, "top_k": case.moe.top_k, "H": case.moe.hidden,
           "I": case.moe.inter, "proj": case.projection,
           "tokens": case.tokens, "T": case.rows, "N": case.n, "K": case.k, "routing": case.routing,
           "b_major": b_major, "dtype": args.dtype, "min_rows": lo, "max_rows": hi, "empty": empty}
    problem = problem_for(case, b_major, dtype)
    if isinstance(problem, Decline):
        return {**row, "note": f"declined: {problem}"}
    a, b, offs, out = operands(case, b_major, dtype, dev)
    ref = None if args.no_check else reference(a, b, offs, device=dev)
    notes, wrong, timed = [], 0, {}
    for cfg in candidates(problem, args.breadth):
        out.fill_(float("nan"))
        entry = {"model": case.model, "proj": case.projection, "tokens": case.tokens, "routing": case.routing,
                 "b_major": b_major, "config": cfg.key()}
        try:
            entry.update(_check_and_time(flydsl_fn(args.via, cfg, problem, a, b, offs, out), ref, args, flush))
        except Exception as e:  # compiling the launcher's arguments failed
            entry["error"] = short_error(e)
        if "error" in entry:
            print(f"  {case.model} {case.projection} {case.tokens} {case.routing} {cfg.key()}: {entry['error']}",
                  file=sys.stderr)
        config_rows.append(entry)
        if entry.get("err", 0) > ERROR_LIMIT:
            wrong += 1
        elif "ms" in entry:
            timed[cfg.key()] = entry
    if wrong:
        notes.append(f"{wrong} config(s) above the error limit")
    if timed:
        best = min(timed.values(), key=lambda e: e["ms"])
        row.update(flydsl_config=best["config"], flydsl_ms=best["ms"], flydsl_err=best["err"])
        base = baseline_for(problem).key()
        row.update(baseline_config=base, baseline_ms=timed.get(base, {}).get("ms"))
        if case.routing == "balanced":
            state.setdefault("balanced", {})[(case.shape_key, b_major)] = best["config"]
        pick = state.get("balanced", {}).get((case.shape_key, b_major))
        if pick:
            row.update(balanced_pick=pick, balanced_pick_ms=timed.get(pick, {}).get("ms"))
    aten = _check_and_time(aten_fn(a, b, offs), ref, args, flush)
    row.update(aten_ms=aten.get("ms"), aten_err=aten.get("err"))
    if "error" in aten:
        notes.append(f"ATen: {aten['error']}")
    if not args.no_triton and "triton_off" not in state:
        try:
            tri = _check_and_time(triton_fn(a, b, offs), ref, args, flush)
            row.update(triton_ms=tri.get("ms"), triton_err=tri.get("err"))
            if "error" in tri:
                notes.append(f"Triton: {tri['error']}")
        except TritonUnavailable as e:
            state["triton_off"] = str(e)
            print(f"grouped_gemm_device_bench: no Triton column: {e}", file=sys.stderr)
        except Exception as e:  # an Inductor compile failure for this case
            notes.append(f"Triton: {short_error(e)}")
    if getattr(args, "vllm", False):
        vllm_column(row, notes, case, b_major, a, b, ref, args, flush)
    if getattr(args, "intree", False):
        try:
            tree = _check_and_time(intree_fn(a, b, offs), ref, args, flush)
            row.update(intree_ms=tree.get("ms"), intree_err=tree.get("err"))
            if "error" in tree:
                notes.append(f"in-tree: {tree['error']}")
        except Exception as e:  # the in-tree backend did not serve it, or failed to compile
            notes.append(f"in-tree: {short_error(e)}")
    flops = case.flops()
    for who in ("flydsl", "aten", "triton", "baseline", "balanced_pick"):
        row[f"{who}_tflops"] = tflops(flops, row.get(f"{who}_ms"))
    if row.get("flydsl_ms"):
        for who in ("aten", "triton", "intree", "vllm"):
            if row.get(f"{who}_ms"):
                row[f"x_{who}"] = row[f"{who}_ms"] / row["flydsl_ms"]
    row["note"] = "; ".join(notes)
    del a, b, offs, out, ref
    return row


COLUMNS = ["model", "G", "top_k", "proj", "tokens", "T", "N", "K", "routing", "b_major", "min_rows", "max_rows",
           "empty", "flydsl_config", "flydsl_ms", "flydsl_tflops", "baseline_config", "baseline_ms",
           "balanced_pick", "balanced_pick_ms", "aten_ms", "aten_tflops", "triton_ms", "triton_tflops", "x_aten",
           "x_triton", "flydsl_err", "aten_err", "triton_err", "note"]
PRINTED = ["model", "proj", "tokens", "routing", "b_major", "flydsl_config", "flydsl_ms", "flydsl_tflops",
           "balanced_pick_ms", "aten_ms", "triton_ms", "x_aten", "x_triton", "note"]
CONFIG_COLUMNS = ["model", "proj", "tokens", "routing", "b_major", "config", "ms", "err", "error"]


def summary(rows: list) -> list[str]:
    """Geometric-mean speedups of the best FlyDSL config: overall, per routing, per expert count."""
    lines = []
    groups = [("all cases", rows)]
    groups += [(f"routing {r}", [x for x in rows if x["routing"] == r]) for r in ROUTINGS]
    groups += [(f"{g} experts", [x for x in rows if x["G"] == g]) for g in sorted({x["G"] for x in rows})]
    for label, mine in groups:
        if not mine:
            continue
        parts = []
        for who, name in (("x_aten", "torch._grouped_mm"), ("x_triton", "Triton (Inductor)")):
            g = geomean(x.get(who) for x in mine)
            parts.append(f"vs {name} {g:.3f}x" if g else f"vs {name} n/a")
        lines.append(f"geometric-mean speedup, {label} ({len(mine)}): " + ", ".join(parts))
    return lines


def plot(path: Path, rows: list) -> bool:
    """FlyDSL's speedups per case (``plots.plot_speedups``) against each column timed; the case
    names B's layout where the rows hold more than one."""
    majors = len({r.get("b_major") for r in rows}) > 1
    label = (lambda r: f"{_label(r)} B {r.get('b_major')}") if majors else _label
    return plot_speedups(path, BENCH.title, rows, present(rows, BENCH.baselines(True, True)), label)


def measure(cases: list[Case], args, state: Optional[dict] = None) -> tuple[list, list]:
    """Every case under every ``args.b_major`` on the current GPU: (rows, config rows).
    ``state`` (see ``bench_case``) is left holding Triton's availability."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda") if args.flush_l2 else None
    rows: list[dict] = []
    config_rows: list[dict] = []
    state = {} if state is None else state
    dev = torch.device("cuda", torch.cuda.current_device())
    for b_major in args.b_major:
        for c in cases:
            print(f"{c.model} {c.projection} tokens={c.tokens} {c.routing} B {b_major}-major ...", file=sys.stderr,
                  flush=True)
            rows.append(bench_case(c, b_major, args, flush, config_rows, dev, state))
            torch.cuda.empty_cache()
    return rows, config_rows


def run(args, cases: list[Case]) -> int:
    from torch_flydsl.runtime.probe import flydsl_info

    info = flydsl_info()
    if not info.usable:
        print(f"grouped_gemm_device_bench: gfx950 found but flydsl is unusable: {info.reason}")
        return 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    state: dict = {}
    rows, config_rows = measure(cases, args, state)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__} (HIP {torch.version.hip}), {args.dtype}, "
          f"FlyDSL via {args.via}, {'L2 flushed' if args.flush_l2 else 'warm L2'}")
    if "triton_off" in state:
        print(f"Triton column empty: {state['triton_off']}")
    print(table([[r.get(c) for c in PRINTED] for r in rows], PRINTED))
    print("\n".join(summary(rows)))
    write_csv(out_dir / "grouped_gemm_bench.csv", rows, COLUMNS)
    write_csv(out_dir / "grouped_gemm_bench_configs.csv", config_rows, CONFIG_COLUMNS)
    png = out_dir / "grouped_gemm_bench.png"
    print(f"wrote {out_dir}/grouped_gemm_bench.csv, grouped_gemm_bench_configs.csv"
          + (f", {png.name}" if plot(png, rows) else " (matplotlib is not installed: no plot)"))
    return 0


def _choices(all_: tuple, what: str):
    def parse(s: str) -> list[str]:
        got = [x for x in s.split(",") if x]
        bad = [x for x in got if x not in all_]
        if bad or not got:
            raise argparse.ArgumentTypeError(f"unknown {what} {bad or s!r}: choose from {', '.join(all_)}")
        return got

    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="FlyDSL grouped GEMM (MoE) vs torch._grouped_mm and Triton on gfx950")
    p.add_argument("--models", default=list(MODELS), type=_choices(tuple(MODELS), "model"),
                   help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--routings", default=list(ROUTINGS), type=_choices(ROUTINGS, "routing"),
                   help=f"comma-separated: {', '.join(ROUTINGS)}")
    p.add_argument("--tokens", default=list(TOKENS), type=lambda s: [int(x) for x in s.split(",")],
                   help="comma-separated token counts (rows are tokens x top-k)")
    p.add_argument("--b-major", default=["col"], type=_choices(("col", "row"), "major"),
                   help="expert weights: col (stored [G,N,K], the default), row (stored [G,K,N]), or col,row")
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--via", default="launcher", choices=["launcher", "launch", "op"])
    p.add_argument("--no-triton", action="store_true", help="skip Inductor's Triton grouped template")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--flush-l2", action="store_true", help="zero 512 MiB before each timed call")
    p.add_argument("--no-check", action="store_true", help="skip the float64 correctness check")
    p.add_argument("--out", default="grouped_gemm_bench", help="directory for the CSVs and the plot")
    p.add_argument("--dry-run", action="store_true", help="list the cases and configs; no GPU needed")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cases = suite(args.models, args.routings, args.tokens)
    if args.dry_run:
        return dry_run(cases, args.b_major, DTYPES[args.dtype], args.breadth)
    why = device_gate()
    if why:
        print(f"grouped_gemm_device_bench: no ROCm gfx950 GPU here ({why}); nothing timed "
              f"(--dry-run lists the {len(cases)} cases)")
        return 0
    return run(args, cases)


if __name__ == "__main__":
    sys.exit(main())


# -- python -m torch_flydsl bench grouped_mm ----------------------------------------------------

FIELDS = (Field("model", str, "custom"), Field("G"), Field("top_k"), Field("H"), Field("I"),
          Field("proj", str, "gate_up", PROJECTIONS), Field("tokens"), Field("routing", str, "balanced", ROUTINGS))


def case_of(rec: dict) -> Case:
    """The case a shape record describes: ``G`` experts, ``top_k`` of them per token, hidden
    ``H``, expert intermediate ``I``; ``proj`` gate_up is N = 2I, K = H, down is N = H, K = I."""
    dims = (rec["G"], rec["top_k"], rec["H"], rec["I"])
    known = MODELS.get(rec["model"])
    same = known is not None and (known.experts, known.top_k, known.hidden, known.inter) == dims
    return Case(rec["model"], rec["proj"], rec["tokens"], rec["routing"], None if same else Moe(*dims, rec["model"]))


def _from_spec(shapes: list):
    """The MoE cases of a precompile shapes spec: each ``grouped_mm`` W13 shape (``n`` = 2I,
    ``k`` = H) paired with its W2 (``n`` = H, ``k`` = I) at the same routed rows, experts, dtype
    and ``top_k`` (the vLLM MoE route records both, with ``top_k``), as a gate_up and a down
    record with balanced routing. A shape with no partner, or rows that are not a multiple of
    its ``top_k``, or not bf16 with column-major experts, is left out (the reason goes to stderr)."""
    import sys

    mine = [s for s in shapes if s.op == BENCH.op]
    if not mine:
        return "holds no grouped_mm shape, which is what bench grouped_mm times"
    keyed = {(s.m, s.n, s.k, s.get("groups"), s.dtype, s.get("top_k", 1), s.get("b_major", "col")) for s in mine}
    out, paired = [], set()
    for m, n, k, g, dtype, top_k, major in sorted(keyed):
        down = (m, k, n // 2, g, dtype, top_k, major)
        if n % 2 or down not in keyed or m % top_k or dtype != "bfloat16" or major != "col":
            continue
        paired |= {(m, n, k, g, dtype, top_k, major), down}
        for proj in PROJECTIONS:
            out.append({"model": "recorded", "G": g, "top_k": top_k, "H": k, "I": n // 2, "proj": proj,
                        "tokens": m // top_k, "routing": "balanced"})
    for m, n, k, g, dtype, top_k, major in sorted(keyed - paired):
        why = (f"{dtype} (the recorded-shape path times bfloat16; --dtype fp16 with a shape file of cases times fp16)"
               if dtype != "bfloat16" else "row-major experts (vLLM's are stored [N, K])" if major != "col" else
               f"{m} rows are not a multiple of top_k={top_k}" if m % top_k else
               "no W13/W2 partner (a W13 [2I, H] and a W2 [H, I] at the same rows, experts, dtype and top_k)")
        print(f"bench grouped_mm: leaves out the recorded shape m={m} n={n} k={k} groups={g} {dtype}: {why}",
              file=sys.stderr)
    return out or "holds no W13/W2 pair of grouped_mm shapes (both GEMMs of an MoE call), which bench grouped_mm times"


def _seed() -> list:
    return [{"model": c.model, "G": c.moe.experts, "top_k": c.moe.top_k, "H": c.moe.hidden, "I": c.moe.inter,
             "proj": c.projection, "tokens": c.tokens, "routing": c.routing} for c in suite()]


def _record_plan(rec: dict, args):
    return plan_keys(problem_for(case_of(rec), args.b_major[0], DTYPES[args.dtype]),
                     lambda p: candidates(p, args.breadth))


def _measure(recs: list, args) -> tuple[list, list]:
    cases = [case_of(r) for r in recs]
    first: dict = {}
    for i, c in enumerate(cases):
        first.setdefault(c.shape_key, i)
    # a shape's balanced routing first: the "balanced pick" column needs it
    return measure(sorted(cases, key=lambda c: (first[c.shape_key], ROUTINGS.index(c.routing))), args)


def _label(r: dict) -> str:
    what = f"{r['proj']} t{r['tokens']} {r['routing']}"
    known = MODELS.get(r["model"])
    if known is not None and (known.experts, known.top_k, known.hidden, known.inter) == (r["G"], r["top_k"], r["H"],
                                                                                        r["I"]):
        return f"{r['model']} {what}"
    return f"{r['model']} G{r['G']} H{r['H']} I{r['I']} {what}"


BENCH = Suite(
    op="grouped_mm",
    intree_op="grouped_mm",
    title="torch._grouped_mm: MoE forward (A[T,K] x B[G,K,N], int32 offs, bf16)",
    fields=FIELDS,
    seed=_seed,
    label=_label,
    plan=_record_plan,
    options=lambda argv: parse_args(argv),
    measure=_measure,
    aten=Baseline("aten", "ATen", "aten_ms"),
    columns=tuple(COLUMNS),
    config_columns=tuple(CONFIG_COLUMNS),
    table_picks=lambda rows, opts: table_picks(rows, opts),
    vllm_plan=lambda rec, args: _vllm_plan(rec, args),
    from_spec=_from_spec,
)


def _vllm_plan(rec: dict, args) -> Optional[str]:
    if args.b_major[0] != "col":
        return None
    said = "vLLM fused-MoE Triton (TritonExperts)"
    return said + (" -- but AITER fused MoE is on: vLLM runs that" if vllm_columns.aiter_moe_on() else "")


TABLE_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class ShapeTimes:
    """One expert GEMM shape as the table would serve it: FlyDSL's config, its time in us (the
    balanced routing's), and per routing measured (FlyDSL's ms with that config, the baseline's
    ``picks.Timed``, ATen's or None), each already checked against the roofline."""

    config: str
    us: float
    times: dict


def table_picks(rows: list, opts=None) -> list:
    """``bench grouped_mm --table``: one ``picks.Pick`` per expert GEMM shape (op ``grouped_mm``,
    ``m`` = tokens x top-k routed rows, ``groups`` = the experts; no bias), across the routings it
    was measured with.

    - One config serves every routing (the table does not key on it): the balanced-routing
      winner (Inductor autotunes with even offsets too), timed under each routing; a shape
      measured under one routing only takes that routing's winner.
    - The baseline: with vLLM, vLLM's fused-MoE Triton kernel (what ``TritonExperts`` runs; B
      col-major only, and no entry while AITER's fused MoE is on, which the re-route leaves
      alone); without, the fastest of ATen (``torch._grouped_mm``), Triton and in-tree.
    - The MoE re-route serves a call only when the table names both of its GEMMs (W13 gate_up and
      W2 down, same experts, top-k, hidden, intermediate and tokens) and then runs both on
      FlyDSL, so a measured pair is judged on the sum of its two GEMMs' times, per routing, and
      gets both entries or neither; a GEMM whose partner was not measured is judged alone.
    - Every routing must win (``bench.picks``: outside the tie band, inside the roofline, not
      losing to ATen)."""
    from . import picks as pk

    vllm = bool(getattr(opts, "vllm", False))
    warm = not getattr(opts, "flush_l2", False)
    shapes: dict = {}
    for r in rows:
        shapes.setdefault(_shape(r), []).append(r)
    times = {key: _shape_times(rs, vllm, warm) for key, rs in shapes.items()}
    out = []
    for key, rs in shapes.items():
        g, top_k, h, i, proj, tokens, b_major, dtype = key
        other = "down" if proj == "gate_up" else "gate_up"
        mine, partner = times[key], times.get((*key[:4], other, *key[5:]))
        notes: tuple = ()
        if isinstance(mine, pk.Verdict):
            verdict = mine
        elif partner is None:
            verdict = _judge([mine])
            notes = (f"its partner GEMM ({other}) was not measured: the MoE re-route serves a call only when the "
                     "table names both",)
        elif isinstance(partner, pk.Verdict):
            verdict = pk.undecided(f"its partner GEMM ({other}) gets no entry ({partner.reason})")
        else:
            verdict = _judge([mine, partner])
        n, k = rs[0]["N"], rs[0]["K"]
        entries = ()
        if verdict.win and isinstance(mine, ShapeTimes):
            entries = pk.entries_for(BENCH.op, TABLE_DTYPES[dtype], tokens * top_k, n, k, mine.config, mine.us,
                                     g, bias=(False,))
        label = _label({**rs[0], "routing": "/".join(r["routing"] for r in rs)})
        out.append(pk.Pick(tuple(rs), label, verdict, entries, (BENCH.op, TABLE_DTYPES[dtype], "nt", n, k, g),
                           tokens * top_k, None, notes))
    return out


def _shape(r: dict) -> tuple:
    return (r["G"], r["top_k"], r["H"], r["I"], r["proj"], r["tokens"], r["b_major"], r.get("dtype", "bf16"))


def _shape_times(rs: list, vllm: bool, warm: bool):
    """The ``ShapeTimes`` of one GEMM shape's rows, or the ``picks.Verdict`` saying why it has none."""
    from . import picks as pk

    if rs[0]["b_major"] != "col":
        return pk.undecided("B row-major ([G, K, N] experts): the table's grouped_mm entries stand for vLLM's "
                            "[G, N, K] experts (B col-major)")
    if vllm and any(r.get("vllm_aiter_moe") for r in rs):
        return pk.undecided("AITER's fused MoE is on (VLLM_ROCM_USE_AITER=1, VLLM_ROCM_USE_AITER_MOE=1): vLLM "
                            "runs it, not TritonExperts, and the plugin's MoE re-route leaves it alone")
    own = [r for r in rs if r["routing"] == "balanced"] or (rs if len(rs) == 1 else [])
    if not own:
        return pk.undecided("measured under several routings but not balanced: one config must serve every "
                            "routing, and it is the balanced-routing winner")
    config, us = own[0].get("flydsl_config"), own[0].get("flydsl_ms")
    if not config or not us:
        return pk.undecided(f"FlyDSL has no time ({own[0].get('note') or 'no config was timed'})")
    times = {}
    for r in rs:
        ours = r["flydsl_ms"] if r is own[0] else r.get("balanced_pick_ms")
        if not ours:
            return pk.undecided(f"FlyDSL's {config} has no time under {r['routing']} routing")
        if vllm:
            base = pk.Timed("vLLM's fused-MoE Triton kernel", r["vllm_ms"]) if r.get("vllm_ms") else None
        else:
            base = pk.fastest(r, (("aten_ms", "ATen"), ("triton_ms", "Triton"), ("intree_ms", "in-tree FlyDSL")))
        if base is None:
            return pk.undecided(f"the baseline has no time under {r['routing']} routing ({r.get('note') or '-'})")
        aten = pk.Timed("ATen", r["aten_ms"]) if r.get("aten_ms") else None
        work = pk.grouped_work(r["T"], r["N"], r["K"], r["G"] - r.get("empty", 0), TABLE_DTYPES[r.get("dtype", "bf16")])
        why = pk.bogus([t for t in (pk.Timed(f"FlyDSL {config}", ours), base, aten) if t is not None], work, warm)
        if why:
            return pk.Verdict(False, True, f"{r['routing']} routing: {why}")
        times[r["routing"]] = (ours, base, aten)
    return ShapeTimes(config, us * 1e3, times)


def _judge(shapes: list):
    """Every routing the ``ShapeTimes`` share, judged on their summed times (``picks.judge``)."""
    from . import picks as pk

    routings = [r for r in shapes[0].times if all(r in s.times for s in shapes)]
    both = " (both GEMMs)" if len(shapes) > 1 else ""
    said = []
    for routing in routings:
        got = [s.times[routing] for s in shapes]
        ours = pk.Timed("FlyDSL" + both, sum(t[0] for t in got))
        base = pk.Timed(got[0][1].label + both, sum(t[1].ms for t in got))
        aten = pk.Timed("ATen" + both, sum(t[2].ms for t in got)) if all(t[2] for t in got) else None
        verdict = pk.judge(ours, base, aten)
        if not verdict.win:
            return pk.Verdict(False, True, f"{routing} routing: {verdict.reason}")
        said.append(f"{routing} {base.ms / ours.ms:.3f}x")
    if not routings:
        return pk.undecided("the pair shares no measured routing")
    return pk.Verdict(True, True, f"wins under every routing over {base.label} ({', '.join(said)})")
