"""Launch configurations of the RMSNorm kernel.

A config fixes how one row maps onto the GPU: ``waves`` wave64 waves per row, ``rows_per_block``
rows per workgroup (one wave each; only with ``waves == 1``), and ``slots`` 16-byte vectors per
thread held in registers between the sum of squares and the scaling. A row of ``n`` elements
fits when ``waves * 64 * slots * vec >= n`` (``vec`` = 8 for 16-bit, 4 for fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..base import Decline, split_by_fit
from .problem import RmsNormProblem

KERNEL_VERSION = "rmsnorm-1"
WAVE_SIZE = 64
MAX_THREADS = 1024
MAX_SLOTS = 8  # 8 x 16 bytes = 32 VGPRs of row data per thread
# Persistent grid cap: workgroups beyond it loop over rows (grid-stride), far below gfx950's
# 2^32-1 work-items per dimension, and enough to fill 256 CUs many times over.
MAX_WORKGROUPS = 65536


@dataclass(frozen=True)
class RmsNormConfig:
    waves: int  # waves per row
    rows_per_block: int
    slots: int  # 16-byte vectors per thread

    @property
    def threads_per_row(self) -> int:
        return self.waves * WAVE_SIZE

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    def capacity(self, vec: int) -> int:
        """Largest row (elements) one pass keeps in registers."""
        return self.threads_per_row * self.slots * vec

    def key(self) -> str:
        return f"rms_w{self.waves}_r{self.rows_per_block}_s{self.slots}"

    @classmethod
    def from_key(cls, key: str) -> "RmsNormConfig":
        try:
            w, r, s = key.removeprefix("rms_").split("_")
            assert w[0] == "w" and r[0] == "r" and s[0] == "s"
            return cls(int(w[1:]), int(r[1:]), int(s[1:]))
        except (ValueError, AssertionError, IndexError):
            raise ValueError(f"not an RMSNorm config key: {key!r}") from None

    def static_problems(self) -> list[str]:
        p = []
        if self.waves not in (1, 2, 4, 8, 16):
            p.append(f"waves={self.waves} is not a power of two in 1..16")
        if self.rows_per_block not in (1, 2, 4, 8):
            p.append(f"rows_per_block={self.rows_per_block} is not 1, 2, 4 or 8")
        if self.waves > 1 and self.rows_per_block > 1:
            p.append("several rows per workgroup need one wave per row (a row's waves share a barrier)")
        if self.threads > MAX_THREADS:
            p.append(f"{self.threads} threads per workgroup > {MAX_THREADS}")
        if not 1 <= self.slots <= MAX_SLOTS:
            p.append(f"slots={self.slots} outside 1..{MAX_SLOTS}")
        return p


C = RmsNormConfig
# Curated: one wave per row (4 rows per workgroup) for short rows, 4/8/16 waves per row as
# rows grow (256/512/1024 threads), registers filled up to 4-8 vectors per thread.
CURATED = (
    C(1, 4, 1), C(1, 4, 2), C(1, 4, 4), C(1, 4, 8),
    C(4, 1, 1), C(4, 1, 2), C(4, 1, 4),
    C(8, 1, 4),
    C(16, 1, 4), C(16, 1, 8),
)
BASELINE = C(4, 1, 4)


def config_fits(cfg: RmsNormConfig, problem: RmsNormProblem) -> Optional[Decline]:
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    cap = cfg.capacity(problem.vec)
    if problem.n > cap:
        return Decline("config", f"{cfg.key()} keeps {cap} elements of a row in registers; the row has {problem.n}")
    return None


def max_n(vec: int) -> int:
    return max(c.capacity(vec) for c in CURATED)


SINGLE_WAVE_MAX_N = 1024


def baseline_for(problem: RmsNormProblem) -> RmsNormConfig:
    """The one config used without autotuning: rows up to ``SINGLE_WAVE_MAX_N`` elements get one
    wave each (4 rows per workgroup); longer rows 4, 8, then 16 waves (256/512/1024 threads),
    the first that holds the row in registers, fewest vectors per thread first."""
    single = problem.n <= SINGLE_WAVE_MAX_N
    for cfg in CURATED:
        if (cfg.waves == 1) == single and config_fits(cfg, problem) is None:
            return cfg
    return BASELINE


def search_space(breadth: str = "curated") -> list[RmsNormConfig]:
    if breadth == "baseline":
        return [BASELINE]
    if breadth in ("curated", "exhaustive"):
        return list(CURATED)
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def configs_for(problem: RmsNormProblem, breadth: str = "baseline"):
    candidates = [baseline_for(problem)] if breadth == "baseline" else search_space(breadth)
    return split_by_fit(candidates, lambda cfg: config_fits(cfg, problem))
