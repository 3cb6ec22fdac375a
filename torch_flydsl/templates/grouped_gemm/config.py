"""Tile configurations of the grouped GEMM kernel, their search spaces and per-problem checks.

Cheap to import: no FlyDSL, no kernel code. A grouped tile is a dense tile (the kernel builds
each output tile from the GEMM toolkit's main loop, MFMA tiling and epilogue, as the dense
kernel does), so a config is the dense config's seven fields under this family's key prefix;
block order within a group is row-major (``group_m`` is 0: which tile a workgroup computes is
decided by the offsets at run time, not by an L2 swizzle).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Optional

from ..base import Decline, pick_by_size, split_by_fit
from ..dense_gemm.config import SUPPORTED_DTYPES, DenseGemmConfig
from .problem import GroupedGemmProblem

# Bump whenever the kernel's source semantics change (it is part of every cache key).
KERNEL_VERSION = "grouped_gemm-6"
KEY_PREFIX = "grp_"


@dataclass(frozen=True)
class GroupedGemmConfig(DenseGemmConfig):
    def key(self) -> str:
        return KEY_PREFIX + DenseGemmConfig(*astuple(self)).key()

    @classmethod
    def from_key(cls, key: str) -> "GroupedGemmConfig":
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"not a grouped GEMM config key: {key!r}")
        dense = DenseGemmConfig.from_key(key[len(KEY_PREFIX):])
        if dense.split_k != 1:
            raise ValueError(f"not a grouped GEMM config key (no split-K): {key!r}")
        return cls(*astuple(dense))

    def static_problems(self) -> list[str]:
        p = super().static_problems()
        if self.group_m:
            p.append("group_m must be 0 (tiles are assigned from the group offsets at run time)")
        if self.split_k != 1:
            p.append("split_k must be 1 (the grouped kernel has no split-K)")
        return p


BASELINE = GroupedGemmConfig(128, 128, 32, 2, 2, 4, 0)

# MoE groups are small (tokens / experts, often tens of rows): narrow-M tiles waste less of
# each group's last tile; wide N keeps B reads long. Every tile runs the GEMM toolkit's main
# loop as the dense kernel does, whose steady state waits with ``(stages - 2)`` tiles' DMAs
# still in flight: with 2 stages that is ``vmcnt(0)``, a drain every K tile. So, as the dense
# family's curated list: every config keeps >= 2 tiles' DMAs in flight across its barrier
# (stages >= 3; where LDS is tight, block_k 32 with 4 stages instead of 64 with 2) and >= 2
# waves per SIMD (LDS <= 80 KiB for 4-wave workgroups, two per CU; 8-wave workgroups
# otherwise). ``benchmarks/isa_report.py --family grouped`` shows the resulting main loops,
# test/templates/test_grouped_gemm_schedule.py records them.
CURATED = (
    BASELINE,
    GroupedGemmConfig(16, 64, 128, 1, 4, 3, 0),
    GroupedGemmConfig(32, 128, 64, 1, 4, 3, 0),
    GroupedGemmConfig(64, 64, 64, 2, 2, 3, 0),
    GroupedGemmConfig(64, 128, 64, 2, 2, 3, 0),
    GroupedGemmConfig(128, 64, 64, 2, 2, 3, 0),
    GroupedGemmConfig(128, 256, 64, 2, 4, 3, 0),
    GroupedGemmConfig(256, 128, 64, 4, 2, 3, 0),
    # Large token counts (thousands of rows per expert): the dense family's big tile on the
    # register-prefetch pipeline (gemm.prefetch_loop; docs/gemm_schedules.md).
    GroupedGemmConfig(256, 256, 32, 2, 4, 4, 0, prefetch=1),
)

# The register-prefetch loop holds a second A/B fragment set: at 128 accumulators per lane the
# prefetch tile fits the 256 VGPRs of 2 waves per SIMD in the forward (grp_m256n256k32_w2x4_s4_g0_rp:
# 238 with K-contiguous experts, 246 row-major) but not along K (its K masks: 1 VGPR spilled).
PREFETCH_SPILL_ACC_REGS = 128

# With autotuning off, one config per problem, by the mean rows per group.
_BASELINE_BY_ROWS = (
    (32, (GroupedGemmConfig(32, 128, 64, 1, 4, 3, 0),)),
    (64, (GroupedGemmConfig(64, 128, 64, 2, 2, 3, 0),)),
)


def baseline_for(problem: GroupedGemmProblem) -> GroupedGemmConfig:
    """The one config the ``baseline`` breadth offers: by the mean rows per group."""
    mean_rows = problem.tokens if problem.along_k else problem.tokens / max(problem.groups, 1)
    return pick_by_size(mean_rows, _BASELINE_BY_ROWS, lambda cfg: config_fits(cfg, problem) is None, BASELINE)


def search_space(breadth: str = "curated") -> list[GroupedGemmConfig]:
    if breadth == "baseline":
        return [BASELINE]
    if breadth == "curated":
        return list(CURATED)
    if breadth == "exhaustive":
        from ..dense_gemm.config import search_space as dense_space

        return [GroupedGemmConfig(*astuple(c)) for c in dense_space("exhaustive") if c.group_m == 0]
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: GroupedGemmConfig, problem: GroupedGemmProblem) -> Optional[Decline]:
    """Can ``cfg`` compute ``problem`` exactly? Any group sizes (tails masked per group), any
    N; K must be a multiple of block_k (no K tail, as in the dense kernel) unless the groups
    split K (then every group's K tail is masked)."""
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    if problem.dtype not in SUPPORTED_DTYPES:
        return Decline("dtype", f"grouped GEMM supports bf16 and fp16, got {problem.dtype}")
    if cfg.prefetch and cfg.acc_regs_per_lane >= PREFETCH_SPILL_ACC_REGS and problem.along_k:
        return Decline("fit", f"{cfg.key()}: with groups along K (the weight gradient) this big register-prefetch "
                              "tile needs more than the 256 VGPRs of 2 waves per SIMD (it spills); it serves the "
                              "forward (groups split the rows)")
    if problem.k % cfg.block_k and not problem.along_k:  # along K, each group's K tail is masked
        return Decline("shape", f"{cfg.key()}: K={problem.k} is not a multiple of block_k={cfg.block_k} "
                                "(the kernel has no K tail)")
    return None


def configs_for(problem: GroupedGemmProblem, breadth: str):
    """The configs of ``breadth`` that fit ``problem``, and the others with their reasons
    (``baseline``: the one ``baseline_for`` picks)."""
    candidates = [baseline_for(problem)] if breadth == "baseline" else search_space(breadth)
    return split_by_fit(candidates, lambda cfg: config_fits(cfg, problem))
