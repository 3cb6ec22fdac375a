"""Tile configurations of the MX scaled GEMM kernel, their search spaces and per-problem checks.

Cheap to import: no FlyDSL, no kernel code (Inductor choice generation and ``explain`` call it).

The kernel (``kernel.py``) is fixed to one MFMA, ``v_mfma_scale_f32_16x16x128_f8f6f4`` on
wave64, which consumes 128 K values per instruction; ``block_k`` (logical K values per tile)
is 128, 256 or 512 (1, 2 or 4 MFMA K steps, as a lane's 32-bit scale word holds at most 4
E8M0 bytes). A/B tiles move through LDS with gfx950's async buffer->LDS DMA, 16 bytes per lane
per instruction, and the E8M0 scale tiles with its 4-byte variant. The byte sizes of a tile
depend on the operand formats (one byte per MXFP8 value, half a byte per MXFP4 value), so some
checks take the formats.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import Optional

import torch

from ..base import Decline, pick_by_size, split_by_fit
from ..gemm.geometry import c_lds_row_stride
from ..gemm.limits import (DEEP_STAGES, DMA_BYTES, LDS_LIMIT_BYTES, MAX_ACC_REGS_PER_LANE, MAX_THREADS, MAX_VMCNT,
                           WAVE_SIZE, one_round_problem, resident_workgroups)
from .problem import FORMATS, OUT_DTYPES, SCALE_BLOCK, MxFormat, ScaledGemmProblem

# Bump whenever the kernel's source semantics change (it is part of every cache key).
KERNEL_VERSION = "scaled_gemm-2"

MMA_M, MMA_N, MMA_K = 16, 16, 128  # v_mfma_scale_f32_16x16x128_f8f6f4
MAX_STEPS = 4  # MFMA K steps per tile: opsel picks one of the 4 bytes of a lane's scale word
SCALE_SLOTS = 2  # scale chunk slots in LDS: the chunk being consumed and the next one
SCALE_DMA_BYTES = 4  # one async 32-bit DMA per (row, 128 K values) of a scale tile
KEY_PREFIX = "mx_"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileBytes:
    """Byte geometry of one K tile for given operand formats (what the DMA and LDS see)."""

    a_row: int  # bytes of one A row in a K tile
    b_row: int
    a_dma: int  # 16-byte DMAs per thread per K tile (A data)
    b_dma: int
    sa_dma: int  # 4-byte DMAs per thread per scale chunk (A scales; the last round may be padding)
    sb_dma: int
    threads: int
    exact: bool  # every data tile splits evenly into 16-byte vectors over the threads
    chunk_dwords: int  # scale dwords per row in one chunk slot (chunk tiles x MFMA steps)

    @property
    def data_per_tile(self) -> int:
        """16-byte data DMAs per thread per K tile."""
        return self.a_dma + self.b_dma

    @property
    def scales_per_chunk(self) -> int:
        """4-byte scale DMAs per thread per scale chunk."""
        return self.sa_dma + self.sb_dma

    @property
    def scale_slots_a(self) -> int:
        """Dwords of one A-scale chunk slot in LDS (padded to whole DMA rounds)."""
        return self.sa_dma * self.threads

    @property
    def scale_slots_b(self) -> int:
        return self.sb_dma * self.threads


@dataclass(frozen=True)
class ScaledGemmConfig:
    """One tile configuration. Every field is a compile-time constant of the kernel."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128  # logical K values per tile (a multiple of 128, at most 512)
    m_waves: int = 2
    n_waves: int = 2
    stages: int = 2  # LDS buffers; stages-1 K tiles are in flight ahead of compute
    group_m: int = 0  # group-M block swizzle for L2 reuse; 0 = row-major block order
    chunk: int = 1  # K tiles per scale slot (two slots: one consumed while the next is refilled)
    # 1: the register-prefetch pipeline (``scaled_gemm.prefetch``): tile kt+1's LDS reads (data
    # and scale words) go into a second register set under tile kt's MFMAs. Key suffix ``_rp``.
    prefetch: int = 0
    # 1: the ping-pong pipeline (``scaled_gemm.pingpong``): two LDS stages, the waves in two groups
    # half a K tile apart, one multiplying while the other reads LDS. Key suffix ``_pp``.
    pingpong: int = 0

    @property
    def waves(self) -> int:
        return self.m_waves * self.n_waves

    @property
    def threads(self) -> int:
        return self.waves * WAVE_SIZE

    @property
    def steps(self) -> int:
        """MFMA K steps (128 K values each) per tile."""
        return self.block_k // MMA_K

    @property
    def acc_regs_per_lane(self) -> int:
        return (self.block_m // self.m_waves) * (self.block_n // self.n_waves) // WAVE_SIZE

    def key(self) -> str:
        # The dense family's spelling of the seven tile fields, then the scale chunk (when > 1)
        # and ``_rp`` for the register-prefetch pipeline or ``_pp`` for the ping-pong one.
        chunk = f"_c{self.chunk}" if self.chunk != 1 else ""
        loop = "_rp" if self.prefetch else "_pp" if self.pingpong else ""
        return (f"{KEY_PREFIX}m{self.block_m}n{self.block_n}k{self.block_k}_w{self.m_waves}x{self.n_waves}"
                f"_s{self.stages}_g{self.group_m}{chunk}{loop}")

    _KEY_RE = re.compile(r"^m(\d+)n(\d+)k(\d+)_w(\d+)x(\d+)_s(\d+)_g(\d+)(?:_c(\d+))?(_rp|_pp)?$")

    @classmethod
    def from_key(cls, key: str) -> "ScaledGemmConfig":
        match = cls._KEY_RE.match(key[len(KEY_PREFIX):]) if key.startswith(KEY_PREFIX) else None
        if match is None:
            why = " (no split-K)" if "_sk" in key else ""
            raise ValueError(f"not a scaled GEMM config key{why}: {key!r}")
        *tile, c, loop = match.groups()
        bm, bn, bk, mw, nw, st, gm = (int(g) for g in tile)
        return cls(bm, bn, bk, mw, nw, st, gm, int(c) if c is not None else 1, int(loop == "_rp"), int(loop == "_pp"))

    def __str__(self) -> str:
        return self.key()

    def tile_bytes(self, a: MxFormat, b: MxFormat) -> TileBytes:
        a_row, b_row = a.row_bytes(self.block_k), b.row_bytes(self.block_k)
        a_vec, b_vec = self.block_m * a_row // DMA_BYTES, self.block_n * b_row // DMA_BYTES
        t = self.threads
        q = self.chunk * self.steps  # scale dwords per row and chunk: one byte per 32 K values
        return TileBytes(
            a_row, b_row, a_vec // t, b_vec // t,
            _ceil_div(self.block_m * q, t), _ceil_div(self.block_n * q, t),
            t, a_vec % t == 0 and b_vec % t == 0, q,
        )

    def lds_bytes(self, a: MxFormat, b: MxFormat, out_dtype: torch.dtype = torch.bfloat16) -> int:
        """Static LDS: the A/B data stages and the two scale chunk slots, aliased by the
        epilogue's padded C tile."""
        tb = self.tile_bytes(a, b)
        stage = self.block_m * tb.a_row + self.block_n * tb.b_row
        slots = SCALE_SLOTS * SCALE_DMA_BYTES * (tb.scale_slots_a + tb.scale_slots_b)
        c = self.block_m * c_lds_row_stride(self.block_n) * out_dtype.itemsize
        return max(self.stages * stage + slots, c)

    def resident_per_cu(self, a: MxFormat, b: MxFormat, out_dtype: torch.dtype = torch.bfloat16) -> int:
        """Workgroups of this config one CU holds at once for formats ``a`` x ``b``
        (``gemm.limits.resident_workgroups``)."""
        return resident_workgroups(self.lds_bytes(a, b, out_dtype), self.threads)

    def static_problems(self) -> list[str]:
        """Why this config cannot compile for any formats (empty when it can)."""
        p = []
        if min(self.block_m, self.block_n, self.block_k, self.m_waves, self.n_waves) <= 0:
            return ["tile sizes and wave counts must be positive"]
        if self.block_m % (MMA_M * self.m_waves):
            p.append(f"block_m={self.block_m} is not a multiple of {MMA_M} x m_waves={self.m_waves}")
        if self.block_n % (MMA_N * self.n_waves):
            p.append(f"block_n={self.block_n} is not a multiple of {MMA_N} x n_waves={self.n_waves}")
        if self.block_k % MMA_K or not 1 <= self.block_k // MMA_K <= MAX_STEPS:
            p.append(f"block_k={self.block_k} is not 128, 256 or 512 (MFMA K steps of 128, at most "
                     f"{MAX_STEPS} per scale word)")
        if self.threads > MAX_THREADS:
            p.append(f"{self.threads} threads exceed the workgroup limit {MAX_THREADS}")
        if not 2 <= self.stages <= 6:  # 5-6: the deep configs
            p.append(f"stages={self.stages} is outside 2..6")
        if self.group_m < 0:
            p.append("group_m must be >= 0")
        if self.chunk < 1:
            p.append("chunk (K tiles per scale slot) must be >= 1")
        if self.prefetch not in (0, 1):
            p.append("prefetch must be 0 or 1")
        elif self.prefetch and self.stages < 3:
            p.append("the register-prefetch loop needs stages >= 3 (with 2 it would wait vmcnt(0) every K tile)")
        if self.pingpong not in (0, 1):
            p.append("pingpong must be 0 or 1")
        elif self.pingpong:
            if self.prefetch:
                p.append("a config runs one pipeline: prefetch or pingpong, not both")
            if self.stages != 2 or self.chunk != 1:
                p.append("the ping-pong loop runs 2 LDS stages with the scales staged per K tile (stages=2, chunk=1): "
                         "with 3 or more stages the plain pipeline keeps 2 tiles in flight without it")
            if self.waves % 2:
                p.append(f"the ping-pong loop splits the waves into two groups; {self.waves} is odd")
            if (self.block_m // (MMA_M * self.m_waves)) % 2:
                p.append("the ping-pong loop reads each wave's A blocks in two halves; block_m / (16 x m_waves) "
                         "must be even")
        if not p and self.acc_regs_per_lane > MAX_ACC_REGS_PER_LANE:
            p.append(f"{self.acc_regs_per_lane} fp32 accumulators per lane exceed {MAX_ACC_REGS_PER_LANE}")
        return p

    def format_problems(self, a: MxFormat, b: MxFormat, out_dtype: torch.dtype = torch.bfloat16) -> list[str]:
        """Why this (statically valid) config cannot compile for operand formats ``a`` x ``b``."""
        p = []
        tb = self.tile_bytes(a, b)
        for name, rows, row, fmt in (("A", self.block_m, tb.a_row, a), ("B", self.block_n, tb.b_row, b)):
            vectors = rows * row // DMA_BYTES
            if vectors % self.threads:
                p.append(f"{name} tile ({rows} x {self.block_k} {fmt.name}) has {vectors} 16-byte vectors, "
                         f"not a multiple of {self.threads} threads")
        lds = self.lds_bytes(a, b, out_dtype)
        if lds > LDS_LIMIT_BYTES:
            p.append(f"LDS {lds} B exceeds {LDS_LIMIT_BYTES} B")
        # The prefetch loop keeps one more data tile and scale chunk in flight (its prologue); in
        # the ping-pong loop the B group has two B tiles with their scales in flight at most,
        # each fetched by half the threads.
        in_flight = (self.stages - 2 + self.prefetch) * tb.data_per_tile + (1 + self.prefetch) * tb.scales_per_chunk
        if self.pingpong:
            in_flight = max(self.pingpong_dmas(a, b))
        if not p and in_flight > MAX_VMCNT:
            p.append(f"up to {in_flight} DMA loads in flight per thread exceed the vmcnt limit {MAX_VMCNT}")
        return p

    def pingpong_dmas(self, a: MxFormat, b: MxFormat) -> tuple[int, int]:
        """The ping-pong loop's DMAs in flight per thread at most: the A group's (three A halves
        with their scales) and the B group's (two B tiles with theirs), each group fetching with
        half the threads (``scaled_gemm.pingpong``)."""
        tb, t = self.tile_bytes(a, b), self.threads // 2
        half = self.block_m // 2
        a_half = half * tb.a_row // DMA_BYTES // t + _ceil_div(half * tb.chunk_dwords, t)
        b_tile = self.block_n * tb.b_row // DMA_BYTES // t + _ceil_div(self.block_n * tb.chunk_dwords, t)
        return 3 * a_half, 2 * b_tile

    def is_valid(self) -> bool:
        return not self.static_problems()

    def fits_formats(self, a: MxFormat, b: MxFormat, out_dtype: torch.dtype = torch.bfloat16) -> bool:
        return not self.static_problems() and not self.format_problems(a, b, out_dtype)


BASELINE = ScaledGemmConfig(128, 128, 128, 2, 2, 3, 0, 2)

# Hand-picked (docs/mx_schedules.md). Every one but the last runs the no-drain pipeline (stages >= 3)
# with scale chunks of 2-8 K tiles; the last runs the ping-pong pipeline. Decode (M <= 128): tiles narrow enough to put >= 256 workgroups on
# N = 4096 at M <= 32, either small enough in LDS for >= 2 waves per SIMD, or 512 K values deep
# (fewer round trips), or 2 waves of 32 x 32 with 3 tiles in flight (fewest LDS bytes per MFMA);
# the reasons of those below 2 waves per SIMD are in ONE_WAVE_PER_SIMD. M >= 2048: 256 x 128
# tiles of 8 waves (2 waves per SIMD) or 4 waves of 128 x 64 each (fewer LDS bytes per MFMA),
# the 4-stage tiles, and the ping-pong 256 x 256 at the end.
CURATED = (
    BASELINE,
    ScaledGemmConfig(16, 32, 512, 1, 2, 4, 0, 4),
    ScaledGemmConfig(32, 16, 512, 2, 1, 3, 0, 2),
    ScaledGemmConfig(32, 16, 256, 2, 1, 3, 0, 2),
    ScaledGemmConfig(32, 64, 256, 1, 4, 3, 0, 2),
    ScaledGemmConfig(32, 64, 256, 1, 2, 4, 0, 4),
    ScaledGemmConfig(64, 64, 128, 2, 2, 3, 0, 4),
    ScaledGemmConfig(64, 128, 128, 2, 2, 3, 0, 4),
    ScaledGemmConfig(128, 64, 128, 2, 2, 3, 0, 4),
    ScaledGemmConfig(256, 128, 128, 2, 2, 3, 8, 4),
    ScaledGemmConfig(256, 128, 128, 4, 2, 3, 8, 4),
    ScaledGemmConfig(128, 256, 128, 2, 4, 3, 8, 4),
    # Deep (stages >= DEEP_STAGES; offered only where the whole grid is resident at once): 4-5
    # tiles in flight and scale chunks of 4-8 tiles, so that the scales, refilled one chunk
    # ahead, lead by as many K values as the data (docs/mx_schedules.md). M <= 512 at N = 4096.
    ScaledGemmConfig(16, 32, 512, 1, 2, 6, 0, 8),
    ScaledGemmConfig(32, 64, 256, 1, 4, 6, 0, 4),
    ScaledGemmConfig(64, 128, 128, 2, 2, 6, 0, 8),
    # MXFP4 only (their FP8 stages do not fit in LDS): a 32 x 64 tile 512 K values deep and a
    # 64 x 128 tile 256 K values deep (256 and 128 bytes per FP4 row).
    ScaledGemmConfig(32, 64, 512, 1, 4, 6, 0, 4),
    ScaledGemmConfig(64, 128, 256, 2, 2, 5, 0, 4),
    # Four stages (three K tiles in flight, where the tiles above keep two). 256 x 256 is
    # MXFP4-only (FP8's four 64 KiB stages exceed LDS): the fewest LDS bytes per MFMA of the
    # curated tiles at 2 waves per SIMD, for M >= 4096. 128 x 128 for M ~ 2048 (512 tiles at
    # N = 4096): two workgroups per CU with FP4, one with FP8.
    ScaledGemmConfig(256, 256, 128, 4, 2, 4, 8, 4),
    ScaledGemmConfig(128, 128, 128, 2, 2, 4, 8, 4),
    # Ping-pong (``scaled_gemm.pingpong``): 256 x 256 tiles for M >= 4096 whose two stages are all
    # that fits in LDS (64 KiB each: MXFP8 128 K values deep, MXFP4 256 deep; the latter is
    # MXFP4-only); two wave groups a segment apart keep the MFMA pipe busy and fetch 1.5 K tiles
    # ahead without vmcnt(0).
    ScaledGemmConfig(256, 256, 128, 2, 4, 2, 8, 1, pingpong=1),
    ScaledGemmConfig(256, 256, 256, 2, 4, 2, 8, 1, pingpong=1),
)

_EXHAUSTIVE_AXES = dict(
    block_m=(16, 32, 64, 128, 256),
    block_n=(16, 32, 64, 128, 256),
    block_k=(128, 256, 512),
    m_waves=(1, 2, 4),
    n_waves=(1, 2, 4),
    stages=(2, 3, 4, 5, 6),
    group_m=(0, 8),
    chunk=(1, 2, 4, 8),
    prefetch=(0, 1),
    pingpong=(0, 1),
)


@functools.lru_cache(maxsize=None)
def _exhaustive() -> tuple[ScaledGemmConfig, ...]:
    """Every config that compiles for at least one pair of formats (built once per process: about 16k configs)."""
    names = list(_EXHAUSTIVE_AXES)
    pairs = list(itertools.product(FORMATS.values(), repeat=2))
    out = []
    for values in itertools.product(*_EXHAUSTIVE_AXES.values()):
        cfg = ScaledGemmConfig(**dict(zip(names, values)))
        if cfg.is_valid() and any(not cfg.format_problems(a, b) for a, b in pairs):
            out.append(cfg)
    return tuple(out)


def search_space(breadth: str = "curated") -> list[ScaledGemmConfig]:
    """Configs to try: ``baseline`` (one), ``curated`` (short list) or ``exhaustive`` (every
    config that compiles for at least one pair of formats)."""
    if breadth == "baseline":
        return [BASELINE]
    if breadth == "curated":
        return list(CURATED)
    if breadth == "exhaustive":
        return list(_exhaustive())
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: ScaledGemmConfig, problem: ScaledGemmProblem) -> Optional[Decline]:
    """Can ``cfg`` compute ``problem`` exactly? None when it can, else a Decline with a reason.

    The kernel handles any M and N (tails are masked on store; rows past M / columns past N
    are clamped on load and only feed discarded outputs) and any leading strides. It has no K
    tail: K must be a multiple of block_k. Alignment, scale layout and the 32-bit buffer
    range are properties of the tensors, checked by the family's gate (``eligibility.py``).
    """
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    if problem.a_format not in FORMATS or problem.b_format not in FORMATS:
        return Decline("dtype", f"unknown MX formats {problem.a_format} x {problem.b_format}")
    if problem.out_dtype not in OUT_DTYPES:
        return Decline("dtype", f"output dtype {problem.out_dtype} is not bfloat16 or float16")
    by_format = cfg.format_problems(problem.a_fmt, problem.b_fmt, problem.out_dtype)
    if by_format:
        return Decline("config", f"{cfg.key()} with {problem.a_format} x {problem.b_format}: " + "; ".join(by_format))
    if min(problem.m, problem.n, problem.k) <= 0:
        return Decline("shape", f"empty problem M={problem.m} N={problem.n} K={problem.k}")
    if cfg.stages >= DEEP_STAGES:
        workgroups = -(-problem.m // cfg.block_m) * -(-problem.n // cfg.block_n)
        why = one_round_problem(cfg.key(), workgroups,
                                cfg.resident_per_cu(problem.a_fmt, problem.b_fmt, problem.out_dtype))
        if why:
            return Decline("fit", why)
    if problem.k % SCALE_BLOCK or problem.k % cfg.block_k:
        return Decline(
            "shape",
            f"{cfg.key()}: K={problem.k} is not a multiple of block_k={cfg.block_k} (the kernel has no K tail)",
        )
    if max(problem.m, problem.n, problem.k) >= 2**31:
        return Decline("shape", "M, N and K must fit in int32")
    return None


# With autotuning off, one config per problem, picked by M: below 128 rows most of the 128x128
# baseline's tile is idle and it launches only ceil(N/128) workgroups (32 at N=4096, on 256
# CUs); these narrow tiles launch ceil(N/16) or ceil(N/64). First fitting wins.
_BASELINE_BY_M = (
    (16, (ScaledGemmConfig(16, 32, 512, 1, 2, 4, 0, 4), ScaledGemmConfig(32, 16, 256, 2, 1, 3, 0, 2))),
    (32, (ScaledGemmConfig(32, 16, 512, 2, 1, 3, 0, 2), ScaledGemmConfig(32, 16, 256, 2, 1, 3, 0, 2))),
    (64, (ScaledGemmConfig(64, 64, 128, 2, 2, 3, 0, 4),)),
    (128, (ScaledGemmConfig(32, 64, 256, 1, 4, 3, 0, 2), ScaledGemmConfig(64, 64, 128, 2, 2, 3, 0, 4))),
)

# Curated configs that may run below two waves per SIMD, and why (the schedule goldens hold every
# other curated config to >= 2 waves per SIMD).
_DEEP_DECODE = ("deep decode tile: 512 K values per tile (8 tiles at K = 4096) with {ahead} tiles in flight per "
                "workgroup; its LDS ({lds}) leaves room for {wg} workgroup(s) of 2 waves per CU. A decode GEMM "
                "is bound by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the 2-waves-per-SIMD "
                "decode alternative")
ONE_WAVE_PER_SIMD = {
    "mx_m16n32k512_w1x2_s4_g0_c4": _DEEP_DECODE.format(ahead=3, lds="FP8 102 KiB, FP4 54 KiB", wg="1 (FP8) / 2 (FP4)"),
    "mx_m32n16k512_w2x1_s3_g0_c2": _DEEP_DECODE.format(ahead=2, lds="FP8 75 KiB", wg="2 (FP8)"),
    "mx_m16n32k512_w1x2_s4_g0_c2": "the grouped family's mx_m16n32k512_w1x2_s4_g0_c4 (chunk 2): "
                                   + _DEEP_DECODE.format(ahead=3, lds="FP8 99 KiB", wg="1 (FP8)"),
    "mx_m128n128k128_w2x2_s3_g0_c2": "FP8: 3 stages of 32 KiB + scale slots (100 KiB) leave LDS for one "
                                     "workgroup of 4 waves per CU; the 2-workgroup 128x64 / 64x128 tiles are its "
                                     "alternatives",
    "mx_m256n128k128_w2x2_s3_g8_c4": "by design: 4 waves of 128x64 outputs each read 12 operand rows per 32 "
                                     "MFMAs, the fewest LDS bytes per MFMA of the curated tiles (its 8-wave twin "
                                     "mx_m256n128k128_w4x2_s3_g8_c4 holds 2 waves per SIMD)",
    "mx_m128n128k128_w2x2_s4_g8_c4": "FP8: 4 stages of 32 KiB + scale slots (136 KiB) leave LDS for one workgroup "
                                     "of 4 waves per CU; with FP4 (72 KiB), the case it is curated for, two fit (2 "
                                     "waves per SIMD). FP8's 2-workgroup alternatives are the 128x64 / 64x128 tiles",
    "mx_m32n64k256_w1x2_s4_g0_c4": "decode tile of 2 waves (32 x 32 outputs each: the fewest LDS bytes per MFMA of "
                                   "the decode tiles) with 3 K tiles in flight; its LDS (FP8 102 KiB, FP4 54 KiB) "
                                   "leaves room for 1 (FP8) / 2 (FP4) workgroups per CU. A decode GEMM is bound "
                                   "by the bytes in flight, not by waves; mx_m32n16k256_w2x1_s3_g0_c2 is the "
                                   "2-waves-per-SIMD decode alternative",
}
ONE_WAVE_PER_SIMD["mx_m32n64k256_w1x2_s4_g0_c2"] = ("the grouped family's mx_m32n64k256_w1x2_s4_g0_c4 (chunk 2): "
                                                   + ONE_WAVE_PER_SIMD["mx_m32n64k256_w1x2_s4_g0_c4"])
_DEEP = ("deep tile, offered only where the whole grid is resident at once: {ahead} tiles in flight and scale "
         "chunks of {chunk} tiles per workgroup ({lds}). With so few workgroups the bytes in flight per CU, not "
         "the waves, set the pace; more waves per SIMD would need workgroups the grid does not have")


def _deep_reason(cfg: ScaledGemmConfig) -> str:
    lds = ", ".join(f"{name} {cfg.lds_bytes(f, f) // 1024} KiB" for name, f in (("FP8", FORMATS["e4m3"]),
                                                                              ("FP4", FORMATS["e2m1"]))
                    if cfg.fits_formats(f, f))
    return _DEEP.format(ahead=cfg.stages - 1, chunk=cfg.chunk, lds=lds)


ONE_WAVE_PER_SIMD.update({c.key(): _deep_reason(c) for c in CURATED if c.stages >= DEEP_STAGES})


def baseline_for(problem: ScaledGemmProblem) -> ScaledGemmConfig:
    """The one config the ``baseline`` breadth offers for ``problem`` (all of them curated)."""
    return pick_by_size(problem.m, _BASELINE_BY_M, lambda cfg: config_fits(cfg, problem) is None, BASELINE)


def configs_for(
    problem: ScaledGemmProblem, breadth: str
) -> tuple[list[ScaledGemmConfig], list[tuple[ScaledGemmConfig, Decline]]]:
    """The configs of ``breadth`` that fit ``problem``, and the others with their reasons
    (``baseline``: the one config ``baseline_for`` picks)."""
    candidates = [baseline_for(problem)] if breadth == "baseline" else search_space(breadth)
    return split_by_fit(candidates, lambda cfg: config_fits(cfg, problem))
