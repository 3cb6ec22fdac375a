"""Tile configurations of the MXFP8 grouped GEMM kernel: the scaled family's tiles, row-major
block order within a group (which tile a workgroup computes comes from the offsets)."""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from typing import Optional

from ..base import Decline, pick_by_size, split_by_fit
from ..scaled_gemm.config import CURATED as SCALED_CURATED
from ..gemm.limits import DEEP_STAGES
from ..scaled_gemm.config import ScaledGemmConfig
from ..scaled_gemm.config import config_fits as scaled_fits
from ..scaled_gemm.problem import ScaledGemmProblem
from .problem import ScaledGroupedProblem

KERNEL_VERSION = "scaled_grouped_gemm-2"
KEY_PREFIX = "mxgrp_"


@dataclass(frozen=True)
class ScaledGroupedConfig(ScaledGemmConfig):
    def key(self) -> str:
        return KEY_PREFIX + ScaledGemmConfig(*astuple(self)).key()[len("mx_"):]

    @classmethod
    def from_key(cls, key: str) -> "ScaledGroupedConfig":
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"not an MXFP8 grouped GEMM config key: {key!r}")
        return cls(*astuple(ScaledGemmConfig.from_key("mx_" + key[len(KEY_PREFIX):])))

    def static_problems(self) -> list[str]:
        p = super().static_problems()
        if self.group_m:
            p.append("group_m must be 0 (tiles are assigned from the group offsets at run time)")
        if self.prefetch:
            p.append("prefetch must be 0 (the grouped kernel runs the plain pipeline)")
        if self.pingpong:
            p.append("pingpong must be 0 (the grouped kernel runs the plain pipeline)")
        return p


# The scaled family's row-major tiles with scale chunks of at most 2 K tiles: with the persistent
# walk's state live across the loop, a 4-tile chunk's unrolled addresses spill SGPRs. Not its deep
# tiles: they rest on a chunk lead of 4-8 tiles, and a persistent walk fills every CU anyway.
GROUPED_MAX_CHUNK = 2
CURATED = tuple(replace(ScaledGroupedConfig(*astuple(c)), chunk=min(c.chunk, GROUPED_MAX_CHUNK))
                for c in SCALED_CURATED if c.group_m == 0 and c.stages < DEEP_STAGES)
BASELINE = CURATED[0]
# With autotuning off, one config per problem by the mean rows per group (MoE groups are small).
_BASELINE_BY_ROWS = (
    (32, (ScaledGroupedConfig(32, 64, 256, 1, 4, 3, 0, 2),)),
    (64, (ScaledGroupedConfig(64, 64, 128, 2, 2, 3, 0, 2),)),
)


def baseline_for(problem: ScaledGroupedProblem) -> ScaledGroupedConfig:
    """The one config the ``baseline`` breadth offers: by the mean rows per group."""
    mean_rows = problem.tokens / max(problem.groups, 1)
    return pick_by_size(mean_rows, _BASELINE_BY_ROWS, lambda cfg: config_fits(cfg, problem) is None, BASELINE)


def search_space(breadth: str = "curated") -> list[ScaledGroupedConfig]:
    if breadth == "baseline":
        return [BASELINE]
    if breadth in ("curated", "exhaustive"):
        return list(CURATED)
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: ScaledGroupedConfig, problem: ScaledGroupedProblem) -> Optional[Decline]:
    """The scaled tile's checks for one group's GEMM (any group size: rows are masked)."""
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    tile = ScaledGemmProblem(max(problem.tokens, 1), problem.n, problem.k, problem.a_format, problem.b_format,
                             problem.out_dtype)
    why = scaled_fits(ScaledGemmConfig(*astuple(cfg)), tile)
    return None if why is None else Decline(why.category, why.reason.replace(ScaledGemmConfig(*astuple(cfg)).key(),
                                                                            cfg.key()))


def configs_for(problem: ScaledGroupedProblem, breadth: str):
    candidates = [baseline_for(problem)] if breadth == "baseline" else search_space(breadth)
    return split_by_fit(candidates, lambda cfg: config_fits(cfg, problem))
