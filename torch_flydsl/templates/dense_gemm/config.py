"""Tile configurations of the dense GEMM kernel, their search spaces and per-problem checks.

Cheap to import: no FlyDSL, no kernel code. Everything here is plain arithmetic over the
config fields, so Inductor choice generation and the ``explain`` CLI can call it freely.

The kernel (``kernel.py``) is fixed to one MFMA shape, ``v_mfma_f32_16x16x32_{bf16,f16}``
on wave64, and stages A/B tiles through LDS with gfx950's async buffer->LDS DMA
(16 bytes per lane): the GEMM toolkit's pieces, whose numbers (``gemm.limits``,
``gemm.geometry``) the constraints below check.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, fields
from typing import Optional

import torch

from ..base import Decline, pick_by_size, split_by_fit
from ..gemm.geometry import MMA_K, MMA_M, MMA_N, VEC, c_lds_row_stride
from ..gemm.limits import (DEEP_STAGES, LDS_LIMIT_BYTES, MAX_ACC_REGS_PER_LANE, MAX_THREADS, MAX_VMCNT, NUM_CUS,
                           WAVE_SIZE, one_round_problem, resident_workgroups)
from .problem import GemmProblem

# Bump whenever the kernel's source semantics change (it is part of every cache key).
KERNEL_VERSION = "dense_gemm-7"

ELEM_BYTES = 2  # bf16 / fp16
MAX_SPLIT_K = 16
# Split-K's per-output-tile counters at the head of its workspace (int32, zero between
# launches). Split-K is offered only while the output tiles leave CUs idle (< NUM_CUS tiles).
SPLIT_K_COUNTERS = NUM_CUS
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class DenseGemmConfig:
    """One tile configuration. Every field is a compile-time constant of the kernel."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    m_waves: int = 2
    n_waves: int = 2
    stages: int = 2  # LDS buffers for A/B tiles; stages-1 tiles are in flight ahead of compute
    group_m: int = 0  # group-M block swizzle for L2 reuse; 0 = row-major block order
    # Split-K: each output tile's K tiles are shared out over ``split_k`` workgroups, which
    # write fp32 partial tiles; the last of them to finish sums them in split order
    # (deterministic) and writes the output, in the same launch.
    split_k: int = 1
    # 1: the register-prefetch pipeline (``gemm.prefetch_loop``): tile kt+1's LDS reads go out
    # before tile kt's MFMAs, into a second register fragment set, so no MFMA waits behind a
    # barrier for LDS reads; a buffer is refilled as soon as its tile is in registers.
    prefetch: int = 0

    @property
    def waves(self) -> int:
        return self.m_waves * self.n_waves

    @property
    def threads(self) -> int:
        return self.waves * WAVE_SIZE

    @property
    def lds_bytes(self) -> int:
        """Static LDS: the A/B stage buffers, aliased by the epilogue's padded C tile."""
        ab = self.stages * (self.block_m + self.block_n) * self.block_k * ELEM_BYTES
        c = self.block_m * c_lds_row_stride(self.block_n) * ELEM_BYTES
        return max(ab, c)

    @property
    def resident_per_cu(self) -> int:
        """Workgroups of this config one CU holds at once (``gemm.limits.resident_workgroups``)."""
        return resident_workgroups(self.lds_bytes, self.threads)

    @property
    def dma_per_tile(self) -> int:
        """16-byte DMA loads each thread issues per K tile (A and B)."""
        return (self.block_m + self.block_n) * self.block_k // VEC // self.threads

    @property
    def acc_regs_per_lane(self) -> int:
        return (self.block_m // self.m_waves) * (self.block_n // self.n_waves) // WAVE_SIZE

    def key(self) -> str:
        split = f"_sk{self.split_k}" if self.split_k != 1 else ""
        prefetch = "_rp" if self.prefetch else ""
        return (
            f"m{self.block_m}n{self.block_n}k{self.block_k}"
            f"_w{self.m_waves}x{self.n_waves}_s{self.stages}_g{self.group_m}{split}{prefetch}"
        )

    _KEY_RE = re.compile(r"^m(?P<block_m>\d+)n(?P<block_n>\d+)k(?P<block_k>\d+)_w(?P<m_waves>\d+)x(?P<n_waves>\d+)"
                         r"_s(?P<stages>\d+)_g(?P<group_m>\d+)(?:_sk(?P<split_k>\d+))?(?P<prefetch>_rp)?$")

    @classmethod
    def from_key(cls, key: str) -> "DenseGemmConfig":
        match = cls._KEY_RE.match(key)
        if match is None:
            raise ValueError(f"not a dense GEMM config key: {key!r}")
        names = {f.name for f in fields(cls)}
        values = {name: (1 if name == "prefetch" else int(g)) for name, g in match.groupdict().items()
                  if g is not None and name in names}
        return cls(**values)

    def __str__(self) -> str:
        return self.key()

    def static_problems(self) -> list[str]:
        """Why this config cannot compile at all (empty when it can). Independent of shapes."""
        p = []
        if min(self.block_m, self.block_n, self.block_k, self.m_waves, self.n_waves) <= 0:
            p.append("tile sizes and wave counts must be positive")
            return p
        if self.block_m % (MMA_M * self.m_waves):
            p.append(f"block_m={self.block_m} is not a multiple of {MMA_M} x m_waves={self.m_waves}")
        if self.block_n % (MMA_N * self.n_waves):
            p.append(f"block_n={self.block_n} is not a multiple of {MMA_N} x n_waves={self.n_waves}")
        if self.block_k % MMA_K:
            p.append(f"block_k={self.block_k} is not a multiple of the MFMA K={MMA_K}")
        if self.threads > MAX_THREADS:
            p.append(f"{self.threads} threads exceed the workgroup limit {MAX_THREADS}")
        if not 2 <= self.stages <= 8:
            p.append(f"stages={self.stages} is outside 2..8")
        if self.group_m < 0:
            p.append("group_m must be >= 0")
        if not 1 <= self.split_k <= MAX_SPLIT_K:
            p.append(f"split_k={self.split_k} is outside 1..{MAX_SPLIT_K}")
        if self.lds_bytes > LDS_LIMIT_BYTES:
            p.append(f"LDS {self.lds_bytes} B exceeds {LDS_LIMIT_BYTES} B")
        # Each thread issues the same number of 16-byte DMA loads per tile, so every tile must
        # split evenly over the workgroup (keeps the vmcnt-based stage accounting exact).
        for name, rows in (("A", self.block_m), ("B", self.block_n)):
            vectors = rows * self.block_k // VEC
            if vectors % self.threads:
                p.append(
                    f"{name} tile ({rows}x{self.block_k}) has {vectors} 16-byte vectors, "
                    f"not a multiple of {self.threads} threads"
                )
        if self.prefetch not in (0, 1):
            p.append("prefetch must be 0 or 1")
        elif self.prefetch and self.stages < 3:
            p.append("the register-prefetch loop needs stages >= 3 (with 2 it would wait vmcnt(0) every K tile)")
        elif self.prefetch and self.split_k != 1:
            p.append("the register-prefetch loop is for big output tiles, not split-K")
        if not p:
            # The main loop waits with vmcnt = (stages - 2) * loads per tile; the prefetch loop's
            # prologue with (stages - 1).
            in_flight = (self.stages - 2 + self.prefetch) * self.dma_per_tile
            if in_flight > MAX_VMCNT:
                p.append(
                    f"{in_flight} DMA loads in flight per thread exceed the vmcnt limit "
                    f"{MAX_VMCNT} (fewer stages or more threads)"
                )
        if not p and self.acc_regs_per_lane > MAX_ACC_REGS_PER_LANE:
            p.append(
                f"{self.acc_regs_per_lane} fp32 accumulators per lane exceed {MAX_ACC_REGS_PER_LANE}"
            )
        return p

    def is_valid(self) -> bool:
        return not self.static_problems()


BASELINE = DenseGemmConfig(128, 128, 32, 2, 2, 4, 0)

# Hand-picked. Every one keeps >= 2 tiles' DMAs in flight across its barrier (stages >= 3;
# where LDS is tight, block_k 32 with 4 stages instead of 64 with 2) and >= 2 waves per SIMD
# (LDS <= 80 KiB for 4-wave workgroups, two per CU; 8-wave workgroups otherwise).
# benchmarks/isa_report.py shows the resulting main loops.
CURATED = (
    BASELINE,
    # Decode (M <= 32): narrow tiles, deep K tiles, and split-K so that N=4096 launches at
    # least 256 workgroups (offered only while the output tiles leave CUs idle).
    DenseGemmConfig(16, 64, 128, 1, 4, 3, 0),
    DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4),
    DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8),
    DenseGemmConfig(32, 64, 128, 2, 2, 3, 0),
    DenseGemmConfig(32, 64, 128, 2, 2, 3, 0, 4),
    DenseGemmConfig(32, 128, 64, 1, 4, 3, 0),
    # Medium.
    DenseGemmConfig(64, 64, 64, 2, 2, 4, 0),
    DenseGemmConfig(64, 128, 64, 2, 2, 3, 0),
    DenseGemmConfig(128, 64, 64, 2, 2, 3, 0),
    DenseGemmConfig(128, 128, 32, 2, 2, 4, 8),
    # Large: 8 waves, one workgroup per CU.
    DenseGemmConfig(128, 256, 64, 2, 4, 3, 8),
    DenseGemmConfig(256, 128, 64, 4, 2, 3, 8),
    DenseGemmConfig(256, 256, 32, 2, 4, 4, 8),
    # Big (M, N >= 2048): the same tile on the register-prefetch pipeline (gemm.prefetch_loop;
    # docs/gemm_schedules.md): its MFMAs never wait for LDS reads behind a barrier.
    DenseGemmConfig(256, 256, 32, 2, 4, 4, 8, prefetch=1),
    # Deep (stages >= DEEP_STAGES; offered only where the whole grid is resident at once, see
    # config_fits): 5-7 tiles in flight per workgroup for grids of at most one or two workgroups
    # per CU (M <= 512 at N = 4096), where the bytes in flight, not the waves, set the pace.
    DenseGemmConfig(16, 16, 128, 1, 1, 8, 0),
    DenseGemmConfig(32, 32, 128, 2, 1, 8, 0),
    DenseGemmConfig(32, 64, 128, 2, 2, 6, 0),
    DenseGemmConfig(64, 64, 64, 2, 2, 8, 0),
    DenseGemmConfig(64, 128, 64, 2, 2, 6, 0),
)

# Why the deep configs hold fewer than 2 waves per SIMD (the schedule golden prints it; every
# other curated config holds >= 2).
DEEP_REASON = ("deep tile, offered only where the whole grid is resident at once ({wg} workgroup(s) per CU at "
               "most): {ahead} tiles of {kib} KiB in flight per workgroup. With so few workgroups the bytes "
               "in flight per CU, not the waves, set the pace; more waves per SIMD would need workgroups "
               "the grid does not have")

_EXHAUSTIVE_AXES = dict(
    block_m=(16, 32, 64, 128, 256),
    block_n=(16, 32, 64, 128, 256),
    block_k=(32, 64, 128),
    m_waves=(1, 2, 4),
    n_waves=(1, 2, 4),
    stages=(2, 3, 4, 6, 8),
    group_m=(0, 8),
    split_k=(1, 4, 8),
    prefetch=(0, 1),
)


def search_space(breadth: str = "curated") -> list[DenseGemmConfig]:
    """Configs to try: ``baseline`` (one), ``curated`` (short list) or ``exhaustive``."""
    if breadth == "baseline":
        return [BASELINE]
    if breadth == "curated":
        return list(CURATED)
    if breadth == "exhaustive":
        names = list(_EXHAUSTIVE_AXES)
        out = []
        for values in itertools.product(*_EXHAUSTIVE_AXES.values()):
            cfg = DenseGemmConfig(**dict(zip(names, values)))
            if cfg.is_valid():
                out.append(cfg)
        return out
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: DenseGemmConfig, problem: GemmProblem) -> Optional[Decline]:
    """Can ``cfg`` compute ``problem`` exactly, and is it worth offering? None when it is, else
    a Decline with a reason.

    The kernel handles any M and N (tails are masked on store; out-of-range rows/columns of A/B
    are clamped and only feed discarded outputs), any K the family gate accepts (a K tail reads
    zeros past K) and any leading strides. Alignment of pointers and leading strides (16 bytes)
    and the 32-bit buffer range are properties of the tensors, checked by the family's
    eligibility gate (``eligibility.py``), not here. A split-K config is offered only where it
    pays: when the output tiles alone leave CUs idle, and every split gets K tiles to pipeline.
    """
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    if problem.dtype not in SUPPORTED_DTYPES:
        return Decline("dtype", f"dense GEMM supports bf16 and fp16 inputs, got {problem.dtype}")
    if problem.a_major not in ("row", "col") or problem.b_major not in ("row", "col"):
        return Decline("layout", f"A and B must each be row- or column-major, got {problem.layout!r}")
    if problem.bias not in (None, "row"):
        return Decline("shape", f"unsupported bias kind {problem.bias!r}")
    if min(problem.m, problem.n, problem.k) <= 0:
        return Decline("shape", f"empty problem M={problem.m} N={problem.n} K={problem.k}")
    if problem.m >= 2**31 or problem.n >= 2**31 or problem.k >= 2**31:
        return Decline("shape", "M, N and K must fit in int32")
    if cfg.stages >= DEEP_STAGES:
        return _deep_fits(cfg, problem)
    if cfg.split_k > 1:
        return _split_k_fits(cfg, problem)
    return None


def _deep_fits(cfg: DenseGemmConfig, problem: GemmProblem) -> Optional[Decline]:
    workgroups = -(-problem.m // cfg.block_m) * -(-problem.n // cfg.block_n) * cfg.split_k
    why = one_round_problem(cfg.key(), workgroups, cfg.resident_per_cu)
    return Decline("fit", why) if why else None


def one_wave_per_simd_reason(cfg: DenseGemmConfig) -> Optional[str]:
    """Why a curated config may hold fewer than 2 waves per SIMD (None: it must hold 2)."""
    if cfg.stages < DEEP_STAGES:
        return None
    kib = (cfg.block_m + cfg.block_n) * cfg.block_k * ELEM_BYTES / 1024
    return DEEP_REASON.format(wg=cfg.resident_per_cu, ahead=cfg.stages - 1, kib=f"{kib:g}")


def _split_k_fits(cfg: DenseGemmConfig, problem: GemmProblem) -> Optional[Decline]:
    tiles = -(-problem.m // cfg.block_m) * -(-problem.n // cfg.block_n)
    k_tiles = -(-problem.k // cfg.block_k)
    per = -(-k_tiles // cfg.split_k)
    if tiles >= NUM_CUS:
        return Decline("fit", f"{cfg.key()}: {tiles} output tiles already fill {NUM_CUS} CUs; split-K "
                              "would only add a reduction")
    if per < cfg.stages - 1 or (cfg.split_k - 1) * per >= k_tiles:
        return Decline("fit", f"{cfg.key()}: K={problem.k} gives {k_tiles} K tiles, too few for "
                              f"{cfg.split_k} splits of at least {cfg.stages - 1} tiles each")
    if (SPLIT_K_COUNTERS + cfg.split_k * problem.m * problem.n) * 4 >= 2**31:
        return Decline("shape", f"{cfg.key()}: the fp32 split-K workspace ({cfg.split_k} x M x N) "
                                "would exceed the 2 GiB a 32-bit buffer offset addresses")
    return None


# With autotuning off, one config per problem, by M: decode-sized M gets a narrow tile (with
# split-K where that fits: few output tiles, enough K tiles), not 128-row tiles that are mostly
# padding and launch ceil(N/128) workgroups.
_BASELINE_BY_M = (
    (16, (DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4), DenseGemmConfig(16, 64, 128, 1, 4, 3, 0))),
    (32, (DenseGemmConfig(32, 64, 128, 2, 2, 3, 0, 4), DenseGemmConfig(32, 64, 128, 2, 2, 3, 0))),
)


def baseline_for(problem: GemmProblem, fits=None) -> DenseGemmConfig:
    """The one config the ``baseline`` breadth offers for ``problem`` (all of them curated):
    the first config of the by-M table's row that ``fits`` (default: ``config_fits`` says
    None), else ``BASELINE``."""
    if fits is None:
        fits = lambda cfg: config_fits(cfg, problem) is None  # noqa: E731
    return pick_by_size(problem.m, _BASELINE_BY_M, fits, BASELINE)


def configs_for(problem: GemmProblem, breadth: str) -> tuple[list[DenseGemmConfig], list[tuple[DenseGemmConfig, Decline]]]:
    """The configs of ``breadth`` that fit ``problem``, and the others with their reasons
    (``baseline``: the one config ``baseline_for`` picks)."""
    candidates = [baseline_for(problem)] if breadth == "baseline" else search_space(breadth)
    return split_by_fit(candidates, lambda cfg: config_fits(cfg, problem))
