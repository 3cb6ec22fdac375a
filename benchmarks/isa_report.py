"""The dense GEMM kernel's main K loop, read from its gfx950 assembly, for every curated config,
and a simple MI355X model of each config on the 15 BF16 NT shapes of
``torch_flydsl.bench.mm.SUITE`` (the dense device benchmark's). Static evidence only: nothing here runs a kernel.
``--intree [PATH]``: the side-by-side report of all three GEMM families against torch 2.15's
in-tree FlyDSL kernels (``benchmarks/isa_compare.py``; docs/perf_compare.md).
``--family grouped``: the same for the grouped GEMM family's configs (the MoE forward kernel:
8 groups, B per expert ``t`` = K-contiguous), modelled on ``GROUPED_SUITE`` (issue 20's MoE
shapes) with the waits the loop's ISA shows (``GROUPED_ASSUMPTIONS``).

    python benchmarks/isa_report.py [--layouts nt] [--dtype bf16] [--breadth curated]
        [--configs KEY,KEY] [--family dense|grouped] [--latency CYCLES] [--no-model] [--model-rows best|all] [--isa-dir DIR]

Per config (compiled for gfx950 on this CPU, bf16, layout ``nt`` = A row-major ``[M, K]``, B
given as ``W[N, K].t()``; other layouts with ``--layouts``), per K tile of the main loop
(``torch_flydsl.runtime.isa`` defines every count): MFMAs, DMAs (async global->LDS loads) and
how many sit between MFMAs, the ``s_waitcnt`` values (``vmcnt(0)`` flagged), barriers,
branches besides the back edge, SALU, the longest MFMA-free run; then VGPR/AGPR/SGPR/LDS,
spills/scratch, workgroups per CU and waves per SIMD (estimates from VGPRs and LDS), and the
issue-9 checks (``done_when_problems``).

FlyDSL writes the ISA only when it lowers a kernel, so run this in a fresh process (a kernel
compiled earlier in the same process comes from FlyDSL's in-memory cache, with no ISA).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from torch_flydsl.bench.mm import SUITE, problem_for
from torch_flydsl.runtime.artifact import (
    LDS_BYTES_PER_CU,
    MAX_WAVES_PER_SIMD,
    SIMDS_PER_CU,
    UNIFIED_VGPRS_PER_LANE,
    VGPR_GRANULE,
    WAVE_SIZE,
    KernelResources,
)
from torch_flydsl.runtime.isa import LoopMetrics, loop_metrics, mfma_per_k_tile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isa_shapes import GROUPED_SHAPES  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MIN_STEADY_K_TILES = 4  # the issue's checks apply to configs that run at least this many K tiles


# -- compile and read --------------------------------------------------------------------------


def operand(rows: int, cols: int, major: str, dtype) -> torch.Tensor:
    """A CPU stand-in ``[rows, cols]``: row-major for 'n', stored transposed for 't'."""
    return torch.empty(rows, cols, dtype=dtype) if major == "n" else torch.empty(cols, rows, dtype=dtype).t()


def dense_compile_args(cfg, layout: str, dtype):
    """The dense kernel on 512 x 512 x 4 K tiles (sizes are runtime values: the loop is the
    same for every shape without a K tail)."""
    from torch_flydsl.templates.dense_gemm.launcher import compile_args

    m, n, k = 512, 512, 4 * cfg.block_k
    a, b = operand(m, k, layout[0], dtype), operand(k, n, layout[1], dtype)
    return compile_args(cfg, a, b, torch.empty(m, n, dtype=dtype), None)


def grouped_compile_args(cfg, layout: str, dtype):
    """The grouped kernel's MoE forward (groups split A's rows by ``offs``): 8 groups of 64 rows,
    N = 512, 4 K tiles; ``layout[1]`` is each expert weight's major as for dense B (``t``: stored
    ``[G, N, K]``, K contiguous; ``n``: ``[G, K, N]``). Sizes and offsets are runtime values."""
    from torch_flydsl.templates.grouped_gemm.launcher import compile_args

    if layout[0] != "n":
        raise ValueError(f"grouped GEMM's A is row-major: layout {layout!r} (use nt or nn)")
    tokens, groups, n, k = 512, 8, 512, 4 * cfg.block_k
    a = torch.empty(tokens, k, dtype=dtype)
    b = (torch.empty(groups, n, k, dtype=dtype).transpose(1, 2) if layout[1] == "t"
         else torch.empty(groups, k, n, dtype=dtype))
    offs = torch.arange(1, groups + 1, dtype=torch.int32) * (tokens // groups)
    return compile_args(cfg, a, b, offs, torch.empty(tokens, n, dtype=dtype))


COMPILE_ARGS = {"dense": dense_compile_args, "grouped": grouped_compile_args}


def compile_with_isa(cfg, layout: str, dtype, dump_dir: Path, family: str = "dense"):
    """Compile ``cfg`` of ``family`` (dense, grouped) for gfx950 with FlyDSL's dump on;
    ``(compiled kernel, ISA lines)``."""
    from torch_flydsl.runtime.compile import compile_gfx950

    jit_fn, jit_args = COMPILE_ARGS[family](cfg, layout, dtype)
    saved = {v: os.environ.get(v) for v in ("FLYDSL_DUMP_IR", "FLYDSL_DUMP_DIR")}
    os.environ.update(FLYDSL_DUMP_IR="1", FLYDSL_DUMP_DIR=str(dump_dir))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # FlyDSL prints a line per dumped pass
            ck = compile_gfx950(jit_fn, *jit_args)
    finally:
        for var, val in saved.items():
            if val is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = val
    files = sorted(Path(dump_dir).glob("**/*final_isa.s"))
    if len(files) != 1:
        raise RuntimeError(f"{cfg.key()} {layout}: expected one ISA under {dump_dir}, found {len(files)} (a kernel "
                           "compiled earlier in this process is not lowered again: use a fresh process)")
    return ck, files[0].read_text().splitlines()


def gemm_kernel(ck) -> KernelResources:
    """The GEMM among a compile's kernels (one since split-K reduces in the same launch; a
    two-launch split-K build also held a reduction kernel without LDS)."""
    return max(ck.kernels, key=lambda k: (k.lds_bytes, k.vgpr))


def workgroups_per_cu(kr: KernelResources, threads: int) -> int:
    """Resident workgroups per CU, limited by unified VGPRs, LDS and 8 waves per SIMD (the same
    estimate as ``KernelResources.waves_per_simd``)."""
    waves = max(1, -(-threads // WAVE_SIZE))
    vgprs = max(VGPR_GRANULE, -(-kr.vgpr // VGPR_GRANULE) * VGPR_GRANULE)
    waves_per_simd_by_vgpr = min(MAX_WAVES_PER_SIMD, UNIFIED_VGPRS_PER_LANE // vgprs)
    by_vgpr = waves_per_simd_by_vgpr * SIMDS_PER_CU // waves
    by_lds = LDS_BYTES_PER_CU // kr.lds_bytes if kr.lds_bytes else by_vgpr
    return min(by_vgpr, by_lds)


@dataclass
class ConfigReport:
    cfg: object  # DenseGemmConfig
    layout: str
    kernel: KernelResources
    metrics: Optional[LoopMetrics]
    seconds: float
    kernels: int = 1  # kernels in the compile (launches per GEMM)
    extra: dict = field(default_factory=dict)  # split-K: handoff_facts()

    @property
    def key(self) -> str:
        return self.cfg.key()

    @property
    def wg_per_cu(self) -> int:
        return workgroups_per_cu(self.kernel, self.cfg.threads)

    @property
    def waves_per_simd(self) -> int:
        return self.kernel.waves_per_simd(self.cfg.threads)


def collect(configs, layouts=("nt",), dtype=torch.bfloat16, dump_root: Optional[Path] = None,
            family: str = "dense") -> list[ConfigReport]:
    """Compile every (config, layout) of ``family`` with its ISA dumped under its own directory
    and read it."""
    reports = []
    with tempfile.TemporaryDirectory(prefix="isa_report_") as tmp:
        root = Path(dump_root or tmp)
        for cfg in configs:
            for layout in layouts:
                ck, lines = compile_with_isa(cfg, layout, dtype, root / f"{layout}_{cfg.key()}", family)
                per_tile = mfma_per_k_tile(cfg.block_m, cfg.block_n, cfg.block_k, cfg.waves)
                extra = handoff_facts(lines) if getattr(cfg, "split_k", 1) > 1 else {}
                reports.append(ConfigReport(cfg, layout, gemm_kernel(ck), loop_metrics(lines, per_tile), ck.seconds,
                                            len(ck.kernels), extra))
    return reports


def handoff_facts(lines: list[str]) -> dict:
    """What a split-K build's code does to hand partial tiles over, counted over the whole
    listing: functions (= launches), program ends, L2 writebacks (``buffer_wbl2``: agent-scope
    release), invalidates (``buffer_inv``: agent-scope acquire), global atomics by mnemonic and
    every ``s_waitcnt`` that waits for ``vmcnt(0)``."""
    code = [ln.split(";")[0].strip() for ln in lines if ln.startswith("\t") and not ln.strip().startswith(".")]
    atomics = sorted({ln.split()[0] for ln in code if ln.startswith(("global_atomic", "buffer_atomic"))})
    return {
        "functions": sum(1 for ln in lines if ln.lstrip().startswith(".type") and "@function" in ln),
        "s_endpgm": sum(ln == "s_endpgm" for ln in code),
        "buffer_wbl2": sum(ln.startswith("buffer_wbl2") for ln in code),
        "buffer_inv": sum(ln.startswith("buffer_inv") for ln in code),
        "atomics": ",".join(atomics) or "-",
        "vmcnt(0)": sum(ln.startswith("s_waitcnt") and "vmcnt(0)" in ln for ln in code),
    }


# -- issue 9's checks ----------------------------------------------------------------------------


def k_tiles_per_workgroup(cfg, k: int) -> int:
    return -(-(-(-k // cfg.block_k)) // getattr(cfg, "split_k", 1))


def offered(cfg, m: int, n: int, k: int) -> bool:
    """Whether the family offers ``cfg`` for this suite shape (it fits, and split-K pays)."""
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.dense_gemm.config import config_fits

    p = problem_for(m, n, k)
    return not isinstance(p, Decline) and config_fits(cfg, p) is None


def runs_steady_state(cfg, family: str = "dense") -> bool:
    """Whether some suite shape the family offers ``cfg`` for gives each of its workgroups at
    least ``MIN_STEADY_K_TILES`` K tiles (only there does the steady-state loop matter)."""
    if family == "grouped":
        return any(grouped_offered(cfg, *shape) and shape[3] // cfg.block_k >= MIN_STEADY_K_TILES
                   for shape in GROUPED_SUITE)
    return any(offered(cfg, m, n, k) and k_tiles_per_workgroup(cfg, k) >= MIN_STEADY_K_TILES for m, n, k in SUITE)


# The grouped family's shapes: issue 20's MoE forward, 8 experts with balanced routing, N=4096,
# K=2048, at 1024 and 8192 tokens (T, G, N, K).
GROUPED_SUITE = GROUPED_SHAPES


def grouped_problem(tokens: int, groups: int, n: int, k: int):
    from torch_flydsl.templates.grouped_gemm import GroupedGemmProblem

    return GroupedGemmProblem(tokens, n, k, groups, torch.bfloat16)


def grouped_offered(cfg, tokens: int, groups: int, n: int, k: int) -> bool:
    from torch_flydsl.templates.grouped_gemm import config_fits

    return config_fits(cfg, grouped_problem(tokens, groups, n, k)) is None


def done_when_problems(r: ConfigReport) -> list[str]:
    """Issue 9's done-when criteria for one config, as the reasons it fails them (empty: passes):
    the main loop waits no ``vmcnt(0)``, at least half its DMAs sit between MFMAs, it carries
    no branch besides its back edge, and the kernel holds >= 2 waves per SIMD."""
    m = r.metrics
    if m is None:
        return ["no main loop with MFMAs found"]
    p = []
    if m.drains_vmcnt:
        p.append(f"vmcnt(0) in the loop (waits {list(m.vmcnt)})")
    if 2 * m.dma_between < m.dma:
        p.append(f"{m.dma_between} of {m.dma} DMAs between MFMAs")
    if m.extra_branches:
        p.append(f"{m.extra_branches} branch(es) besides the back edge")
    if r.waves_per_simd < 2:
        p.append(f"{r.waves_per_simd} wave(s) per SIMD")
    return p


def curated_goldens(dump_dir: Path, family: str = "dense") -> str:
    """JSON of every curated config of ``family`` (bf16, nt): its golden line, its checks' problems
    and whether it runs a steady state (what the schedule golden tests record)."""
    if family == "grouped":
        from torch_flydsl.templates.grouped_gemm.config import search_space
    else:
        from torch_flydsl.templates.dense_gemm.config import search_space
    reports = collect(search_space("curated"), ("nt",), torch.bfloat16, Path(dump_dir), family)
    return json.dumps([{"config": r.key, "line": golden_line(r), "problems": done_when_problems(r),
                        "steady": runs_steady_state(r.cfg, family)} for r in reports])


# -- printing --------------------------------------------------------------------------------------


def golden_line(r: ConfigReport) -> str:
    """One compact line per config: the schedule goldens (test_dense_gemm_schedule.py)."""
    k = r.kernel
    loop = r.metrics.summary() if r.metrics else "no main loop"
    return (f"{r.key} {r.layout}: {loop}; vgpr {k.vgpr} agpr {k.agpr} sgpr {k.sgpr} lds {k.lds_bytes} "
            f"spills {k.spills} scratch {k.scratch_bytes}; {r.wg_per_cu} wg/CU, {r.waves_per_simd} waves/SIMD")


def _g(x: float) -> str:
    return f"{x:g}"


def schedule_rows(reports: list[ConfigReport]) -> tuple[list, list]:
    headers = ["config", "layout", "tiles/iter", "MFMA", "DMA", "DMA betw.", "vmcnt waits", "lgkmcnt waits",
               "barriers", "branches+BE", "SALU", "max MFMA-free", "VGPR", "AGPR", "SGPR", "LDS B", "spills",
               "scratch", "wg/CU", "waves/SIMD", "issue 9"]
    rows = []
    for r in reports:
        m, k = r.metrics, r.kernel
        checks = "ok" if not done_when_problems(r) else "; ".join(done_when_problems(r))
        if m is None:
            loop = ["-"] * 10
        else:
            t = m.per_tile
            vm = ",".join(map(str, m.vmcnt)) + (" (vmcnt(0)!)" if m.drains_vmcnt else "")
            lgkm = f"{len(m.lgkmcnt)}: {','.join(map(str, sorted(set(m.lgkmcnt))))}" if m.lgkmcnt else "-"
            loop = [_g(m.tiles), _g(t(m.mfma)), _g(t(m.dma)), _g(t(m.dma_between)), vm or "-", lgkm,
                    _g(t(m.barriers)), f"{m.extra_branches}+1", _g(t(m.salu)), m.longest_mfma_free]
        rows.append([r.key, r.layout, *loop, k.vgpr, k.agpr, k.sgpr, k.lds_bytes, k.spills, k.scratch_bytes,
                     r.wg_per_cu, r.waves_per_simd, checks])
    return headers, rows


# -- the MI355X model ------------------------------------------------------------------------------

CUS = 256
CLOCK_HZ = 2.4e9
MFMA_CYCLES = 16  # v_mfma_f32_16x16x32_bf16 per SIMD (LLVM's gfx950 scheduling model)
HBM_BYTES_PER_S = 8e12
# L2 -> CU reads: 16 channels x 128 B per clock per XCD (CDNA3's L2, assumed unchanged on CDNA4),
# shared by the XCD's 32 CUs.
L2_BYTES_PER_CLOCK_PER_CU = 16 * 128 / 32
ELEM_BYTES = 2
# Latency terms (split-K only; assumptions, not measurements): a back-to-back kernel gap on one
# stream, and one dependent global access that goes past the XCD's L2 (written-back partial
# tiles, the counter atomic).
LAUNCH_GAP_US = 1.0
MEMORY_ROUND_TRIP_US = 0.7

ASSUMPTIONS = f"""\
MODEL, NOT MEASUREMENT: MI355X as {CUS} CUs x {SIMDS_PER_CU} SIMDs at {CLOCK_HZ / 1e9:g} GHz, {HBM_BYTES_PER_S / 1e12:g} TB/s HBM.
- compute: every MFMA the grid issues (whole tiles: M, N and K rounded up to the tile) costs {MFMA_CYCLES} cycles
  on one SIMD (v_mfma_f32_16x16x32_bf16), spread over all {CUS * SIMDS_PER_CU} SIMDs; scaled up when a CU's
  resident waves (waves per workgroup x workgroups resident on it) fill fewer than {SIMDS_PER_CU} SIMDs.
  Nothing else costs time: no LDS, address, wait or barrier cycles, no latency (the loop schedule the
  table above shows is exactly what this model does NOT see).
- HBM: A, B and C cross HBM once each (2 bytes per element: every re-read of an A or B tile by another
  workgroup hits L2 or the Infinity Cache); split-K adds its fp32 workspace, written once and read once.
- L2: every workgroup reads its (block_m + block_n) x K operand strips into LDS at
  {L2_BYTES_PER_CLOCK_PER_CU:g} B/clock per CU (16 x 128 B/clock per XCD of 32 CUs: CDNA3's L2, assumed for
  CDNA4); this is what makes small tiles lose on large shapes.
- tail quantisation: workgroups spread evenly over the {CUS} CUs; the busiest CU holds ceil(grid/{CUS}) of them,
  so predicted = max(compute, HBM, L2) x ceil(grid/{CUS}) x {CUS} / grid (an idle CU's share of MFMA, HBM
  and L2 throughput is lost: pessimistic for HBM when a small grid could still saturate it).
  'rounds' = ceil(grid / ({CUS} x workgroups resident per CU)), residency from VGPRs and LDS.
- split-K handoff (latency, added to the time above): one launch; each output tile's last workgroup waits
  for one counter atomic round trip and one round trip to read the partial tiles before its epilogue:
  {2 * MEMORY_ROUND_TRIP_US:g} us ({MEMORY_ROUND_TRIP_US:g} us per dependent access past L2, assumed). The two-launch design it
  replaced paid a kernel gap ({LAUNCH_GAP_US:g} us, assumed) plus the reduction kernel's read round trip instead:
  {LAUNCH_GAP_US + MEMORY_ROUND_TRIP_US:g} us ('2-launch us').
- not modelled: launch overhead of the first launch, clocks under load, the Infinity Cache's bandwidth, XCD
  placement, DMA latency and how many bytes each workgroup keeps in flight."""


@dataclass(frozen=True)
class Prediction:
    config: str
    grid: int
    wg_per_cu: int
    rounds: int
    compute_us: float
    hbm_us: float
    l2_us: float
    tail: float
    predicted_us: float
    tflops: float
    handoff_us: float = 0.0  # split-K's last-arriver latency, included in predicted_us
    two_launch_us: float = 0.0  # what the two-launch split-K would have been predicted at


def handoff_us(split: int, launches: int = 1) -> float:
    """Split-K's exposed latency after the GEMM's own time (ASSUMPTIONS): one launch, a counter
    atomic and a partial-tile read round trip; two launches, a kernel gap and the read."""
    if split <= 1:
        return 0.0
    first = MEMORY_ROUND_TRIP_US if launches == 1 else LAUNCH_GAP_US
    return first + MEMORY_ROUND_TRIP_US


def predict(cfg, wg_per_cu: int, m: int, n: int, k: int) -> Prediction:
    """The model's time for ``cfg`` (with ``wg_per_cu`` resident workgroups per CU) on one
    ``m x n x k`` GEMM (ASSUMPTIONS says what it counts)."""
    split = getattr(cfg, "split_k", 1)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    grid = tiles * split
    k_padded = -(-k // cfg.block_k) * cfg.block_k
    mfmas = tiles * (cfg.block_m // 16) * (cfg.block_n // 16) * (k_padded // 32)
    per_cu = -(-grid // CUS)
    resident_waves = cfg.waves * min(max(1, wg_per_cu), per_cu)
    simd_fill = min(SIMDS_PER_CU, resident_waves) / SIMDS_PER_CU
    compute = mfmas * MFMA_CYCLES / (CUS * SIMDS_PER_CU) / CLOCK_HZ / simd_fill
    nbytes = ELEM_BYTES * (m * k + n * k + m * n) + (2 * 4 * split * m * n if split > 1 else 0)
    hbm = nbytes / HBM_BYTES_PER_S
    l2 = grid * (cfg.block_m + cfg.block_n) * (k_padded // split) * ELEM_BYTES / (
        CUS * L2_BYTES_PER_CLOCK_PER_CU * CLOCK_HZ)
    tail = per_cu * CUS / grid
    base_us = max(compute, hbm, l2) * tail * 1e6
    t_us = base_us + handoff_us(split)
    rounds = -(-grid // (CUS * max(1, wg_per_cu)))
    return Prediction(cfg.key(), grid, wg_per_cu, rounds, compute * 1e6, hbm * 1e6, l2 * 1e6, tail, t_us,
                      2 * m * n * k / (t_us * 1e-6) / 1e12, handoff_us(split), base_us + handoff_us(split, 2))


# -- the grouped model: the dense one's throughput floors plus what the loop's waits expose --------

DMA_LATENCY_CYCLES = 1000  # one K tile's DMAs, issue to landed in LDS (~420 ns at 2.4 GHz; assumed)
DMA_ISSUE_FRACTION = 0.5  # of a tile's MFMAs a wave has issued when the next DMAs go out (between them)

GROUPED_ASSUMPTIONS = f"""\
MODEL, NOT MEASUREMENT (grouped): MI355X as {CUS} CUs x {SIMDS_PER_CU} SIMDs at {CLOCK_HZ / 1e9:g} GHz, \
{HBM_BYTES_PER_S / 1e12:g} TB/s HBM; balanced routing (every group T/G rows).
- tiles: G x ceil(rows/block_m) x ceil(N/block_n); persistent grid = min(tile bound, {CUS} x the workgroups LDS lets
  a CU hold (gemm.persistent, at most 4)); the busiest workgroup walks ceil(tiles / grid) tiles of K/block_k K tiles.
- one K tile of one wave: C = its MFMAs x {MFMA_CYCLES} cycles. The loop's waits (read from the ISA) leave
  lead = vmcnt / DMAs per tile + 1 tiles in flight; a DMA goes out after {DMA_ISSUE_FRACTION:g} of a tile's MFMAs and lands
  {DMA_LATENCY_CYCLES} cycles later (assumed: a load that misses L2). A wave's period per K tile is
  P = max(w x C, ({DMA_ISSUE_FRACTION:g} x C + {DMA_LATENCY_CYCLES}) / lead): w waves share a SIMD's MFMA pipe
  (w = resident workgroups per CU, from VGPRs, LDS and the grid, x waves per workgroup / {SIMDS_PER_CU}), and a
  tile cannot start before its DMAs, issued lead tiles earlier, have landed. vmcnt(0) every tile is lead 1.
- predicted = max(tiles per workgroup x K tiles x P / clock, HBM (A, B, C once), L2 ({L2_BYTES_PER_CLOCK_PER_CU:g} B/clock
  per CU for the busiest CU's operand strips)).
- not modelled: LDS, address and barrier cycles, the epilogue, the offsets walk, clocks under load, Infinity Cache."""


@dataclass(frozen=True)
class GroupedPrediction:
    config: str
    grid: int
    tiles: int
    tiles_per_wg: int
    waves_per_simd: float
    lead: float
    period_cycles: float
    schedule_us: float
    hbm_us: float
    l2_us: float
    predicted_us: float
    tflops: float


def predict_grouped(r: ConfigReport, tokens: int, groups: int, n: int, k: int,
                    latency: float = DMA_LATENCY_CYCLES) -> GroupedPrediction:
    """The grouped model's time for report ``r``'s config on one balanced MoE forward
    (GROUPED_ASSUMPTIONS says what it counts)."""
    from torch_flydsl.templates.gemm.persistent import persistent_grid, tile_upper_bound

    cfg, m = r.cfg, r.metrics
    rows = -(-tokens // groups)
    tiles = groups * -(-rows // cfg.block_m) * -(-n // cfg.block_n)
    grid = persistent_grid(tile_upper_bound(tokens, groups, n, cfg.block_m, cfg.block_n), cfg.lds_bytes)
    per_wg = -(-tiles // grid)
    busy = min(tiles, grid)  # workgroups with a tile
    resident = min(r.wg_per_cu, -(-busy // CUS))
    w = max(1.0, resident * cfg.waves / SIMDS_PER_CU)
    c = mfma_per_k_tile(cfg.block_m, cfg.block_n, cfg.block_k, cfg.waves) * MFMA_CYCLES
    dma_tile = m.per_tile(m.dma) if m else 0
    lead = (min(m.vmcnt) / dma_tile + 1) if m and m.vmcnt and dma_tile else 1.0
    period = max(w * c, (DMA_ISSUE_FRACTION * c + latency) / lead)
    k_tiles = k // cfg.block_k
    sched = per_wg * k_tiles * period / CLOCK_HZ
    hbm = ELEM_BYTES * (tokens * k + groups * k * n + tokens * n) / HBM_BYTES_PER_S
    busiest_cu_tiles = -(-tiles // CUS)
    l2 = busiest_cu_tiles * (cfg.block_m + cfg.block_n) * k * ELEM_BYTES / (L2_BYTES_PER_CLOCK_PER_CU * CLOCK_HZ)
    t = max(sched, hbm, l2)
    return GroupedPrediction(cfg.key(), grid, tiles, per_wg, w, lead, period, sched * 1e6, hbm * 1e6, l2 * 1e6,
                             t * 1e6, 2 * tokens * n * k / t / 1e12)


def grouped_model_rows(reports: list[ConfigReport], shapes=GROUPED_SUITE, latency: float = DMA_LATENCY_CYCLES):
    headers = ["T x G x N x K", "config", "grid", "tiles", "tiles/wg", "waves/SIMD", "lead tiles", "P cycles",
               "schedule us", "HBM us", "L2 us", "predicted us", "TFLOP/s", "best"]
    rows = []
    for shape in shapes:
        preds = [predict_grouped(r, *shape, latency) for r in reports if grouped_offered(r.cfg, *shape)]
        best = min(preds, key=lambda p: p.predicted_us) if preds else None
        for p in preds:
            rows.append(["x".join(map(str, shape)), p.config, p.grid, p.tiles, p.tiles_per_wg, _g(p.waves_per_simd),
                         _g(p.lead), round(p.period_cycles), round(p.schedule_us, 2), round(p.hbm_us, 2),
                         round(p.l2_us, 2), round(p.predicted_us, 2), round(p.tflops, 1),
                         "<- best" if p is best else ""])
    return headers, rows


def model(reports: list[ConfigReport], shapes=SUITE) -> list[tuple[tuple[int, int, int], list[Prediction]]]:
    """Per shape, the prediction of every reported config the family offers for it (one report
    per config: the first layout's)."""
    by_key = {}
    for r in reports:
        by_key.setdefault(r.key, r)
    out = []
    for m, n, k in shapes:
        preds = [predict(r.cfg, r.wg_per_cu, m, n, k) for r in by_key.values() if offered(r.cfg, m, n, k)]
        out.append(((m, n, k), preds))
    return out


def best_of(preds: list[Prediction]) -> Prediction:
    """The fastest prediction; among equal ones, the one with the least total pressure
    (compute + HBM + L2 time: the most slack for what the model leaves out)."""
    return min(preds, key=lambda p: (round(p.predicted_us, 6), p.compute_us + p.hbm_us + p.l2_us))


def model_rows(results, which: str = "all") -> tuple[list, list]:
    headers = ["shape", "config", "grid", "wg/CU", "rounds", "compute us", "HBM us", "L2 us", "tail x",
               "handoff us", "predicted us", "TFLOP/s", "2-launch us", "best"]
    rows = []
    for (m, n, k), preds in results:
        if not preds:
            rows.append([f"{m}x{n}x{k}", "no config offered"] + [None] * 12)
            continue
        best = best_of(preds)
        for p in (preds if which == "all" else [best]):
            two = round(p.two_launch_us, 2) if p.handoff_us else None
            rows.append([f"{m}x{n}x{k}", p.config, p.grid, p.wg_per_cu, p.rounds, round(p.compute_us, 2),
                         round(p.hbm_us, 2), round(p.l2_us, 2), round(p.tail, 3), round(p.handoff_us, 2),
                         round(p.predicted_us, 2), round(p.tflops, 1), two, "<- best" if p is best else ""])
    return headers, rows


def main(argv=None) -> int:
    if "--intree" in (sys.argv[1:] if argv is None else argv) or any(
            a.startswith("--intree=") for a in (sys.argv[1:] if argv is None else argv)):
        import isa_compare  # the side-by-side report against torch 2.15's in-tree kernels

        return isa_compare.main(argv)
    from tabulate import tabulate

    from torch_flydsl.runtime.probe import flydsl_info
    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig, search_space
    from torch_flydsl.templates.grouped_gemm.config import GroupedGemmConfig
    from torch_flydsl.templates.grouped_gemm.config import search_space as grouped_space

    p = argparse.ArgumentParser(description="Main K loop of every dense (or grouped) GEMM config from its gfx950 ISA, "
                                            "and an MI355X model (no GPU)")
    p.add_argument("--family", default="dense", choices=list(COMPILE_ARGS),
                   help="dense (mm suite model) or grouped (MoE forward, GROUPED_SUITE model; layouts nt, nn)")
    p.add_argument("--latency", type=float, default=DMA_LATENCY_CYCLES,
                   help="grouped model: DMA latency in cycles")
    p.add_argument("--breadth", default="curated", choices=["baseline", "curated", "exhaustive"])
    p.add_argument("--configs", default=None, help="comma-separated config keys (default: the breadth's configs)")
    p.add_argument("--layouts", default="nt", help="comma-separated: nn,nt,tn,tt")
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--no-model", action="store_true", help="skip the MI355X model")
    p.add_argument("--model-rows", default="all", choices=["all", "best"],
                   help="every (shape, config) prediction, or the best config per shape only")
    p.add_argument("--isa-dir", default=None, help="keep the dumped ISA here (default: a temporary directory)")
    p.add_argument("--json", default=None, help="also write the loop metrics and checks to this file")
    args = p.parse_args(argv)
    info = flydsl_info()
    if not info.usable:
        print(f"isa_report: flydsl is unusable here: {info.reason}")
        return 1
    cls, space = (GroupedGemmConfig, grouped_space) if args.family == "grouped" else (DenseGemmConfig, search_space)
    configs = [cls.from_key(c) for c in args.configs.split(",")] if args.configs else space(args.breadth)
    reports = collect(configs, args.layouts.split(","), DTYPES[args.dtype], Path(args.isa_dir) if args.isa_dir else None,
                      args.family)
    headers, rows = schedule_rows(reports)
    print(f"Main K loop per K tile, {args.dtype}, flydsl {info.version}, gfx950 ISA compiled on the CPU "
          "(definitions: torch_flydsl/runtime/isa.py)")
    print(tabulate(rows, headers=headers, disable_numparse=True))
    failing = [r.key + " " + r.layout for r in reports if done_when_problems(r)]
    print(f"\nissue 9 checks (no vmcnt(0) in the loop, >= half the DMAs between MFMAs, no branch besides the back "
          f"edge, >= 2 waves/SIMD): {len(reports) - len(failing)} of {len(reports)} pass"
          + (f"; failing: {', '.join(failing)}" if failing else ""))
    print(f"compile: {sum(r.seconds for r in reports):.1f} s for {len(reports)} kernels")
    split = [r for r in reports if r.extra]
    if split:
        print("\nSplit-K handoff, whole listing (launches = functions; agent release = buffer_wbl2 sc1 + vmcnt(0), "
              "acquire = vmcnt(0) + buffer_inv sc1):")
        keys = list(split[0].extra)
        print(tabulate([[r.key, r.layout, *(r.extra[k] for k in keys)] for r in split],
                       headers=["config", "layout", *keys], disable_numparse=True))
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"config": r.key, "layout": r.layout, "line": golden_line(r), "problems": done_when_problems(r)}
             for r in reports], indent=1))
    if not args.no_model and args.family == "grouped":
        first = [r for r in reports if r.layout == args.layouts.split(",")[0]]
        print("\n" + GROUPED_ASSUMPTIONS + "\n")
        h, rows = grouped_model_rows(first, latency=args.latency)
        print(tabulate(rows, headers=h, disable_numparse=True))
    elif not args.no_model:
        first = [r for r in reports if r.layout == args.layouts.split(",")[0]]
        results = model(first)
        print("\n" + ASSUMPTIONS + "\n")
        h, rows = model_rows(results, args.model_rows)
        print(tabulate(rows, headers=h, missingval="-", disable_numparse=True))
        print("\nBest config per shape (model, not measurement):")
        best_rows = []
        for (m, n, k), preds in results:
            if preds:
                b = best_of(preds)
                bound = max((b.compute_us, "compute"), (b.hbm_us, "HBM"), (b.l2_us, "L2"))[1]
                best_rows.append([f"{m}x{n}x{k}", b.config, round(b.predicted_us, 2), round(b.tflops, 1), bound,
                                  round(b.tail, 3)])
        print(tabulate(best_rows, headers=["shape", "best config", "predicted us", "TFLOP/s", "bound", "tail x"],
                       disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
