"""Configurations of the TopK kernel: threads per workgroup and the survivor capacity ``k_pad``
(a power of two >= k: the LDS slots the gather fills and the bitonic sort orders)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..base import Decline, split_by_fit

KERNEL_VERSION = "topk-1"
KEY_PREFIX = "topk_"
MAX_N = 32768  # the gather packs per-thread counts into 16-bit fields of one scan
MAX_K = 1024  # survivors live in LDS and are sorted by one bitonic network
THREADS = (256, 512)  # 1024 threads: SGPR spills in the unrolled bitonic network
LDS_LIMIT = 160 * 1024
WAVE = 64
BINS = 256


def k_pad_for(k: int) -> int:
    """The survivor slots for k: a power of two >= k, at least 4 (16-byte LDS arrays)."""
    return max(4, 1 << max(k - 1, 0).bit_length())


@dataclass(frozen=True)
class TopKConfig:
    threads: int = 256
    k_pad: int = 1

    def key(self) -> str:
        return f"{KEY_PREFIX}t{self.threads}_kp{self.k_pad}"

    @classmethod
    def from_key(cls, key: str) -> "TopKConfig":
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"not a TopK config key: {key!r}")
        try:
            t, kp = key[len(KEY_PREFIX):].split("_")
            return cls(int(t[1:]), int(kp[2:]))
        except ValueError:
            raise ValueError(f"not a TopK config key: {key!r}") from None

    def lds_bytes(self) -> int:
        waves = self.threads // WAVE
        r16 = lambda b: -(-b // 16) * 16  # noqa: E731  (every LDS array starts 16-byte aligned)
        return r16(waves * BINS * 4) + 2 * r16(self.k_pad * 4) + r16(waves * 4) + 16

    def static_problems(self) -> list[str]:
        p = []
        if self.threads not in THREADS:
            p.append(f"threads {self.threads} is not one of {THREADS}")
        if self.k_pad < 1 or self.k_pad & (self.k_pad - 1) or self.k_pad > MAX_K:
            p.append(f"k_pad {self.k_pad} is not a power of two in [1, {MAX_K}]")
        if self.lds_bytes() > LDS_LIMIT:
            p.append(f"needs {self.lds_bytes()} bytes of LDS (gfx950 has {LDS_LIMIT})")
        return p


# The variants the compile test builds (every threads count, the k_pad extremes).
CURATED = (TopKConfig(256, 4), TopKConfig(256, 8), TopKConfig(256, 64), TopKConfig(256, 1024), TopKConfig(512, 1024))


def baseline_for(problem) -> TopKConfig:
    """The one config offered with no autotuning: 256 threads (one bin per thread) for rows up
    to 8192 elements, 512 above (more loads in flight per row); ``k_pad`` from k."""
    return TopKConfig(256 if problem.n <= 8192 else 512, k_pad_for(problem.k))


def search_space(problem, breadth: str = "curated") -> list[TopKConfig]:
    if breadth == "baseline":
        return [baseline_for(problem)]
    if breadth in ("curated", "exhaustive"):
        return [TopKConfig(t, k_pad_for(problem.k)) for t in THREADS]
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: TopKConfig, problem) -> Optional[Decline]:
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    if cfg.k_pad < problem.k:
        return Decline("config", f"{cfg.key()}: k_pad {cfg.k_pad} holds fewer than k={problem.k} survivors")
    return None


def configs_for(problem, breadth: str = "baseline"):
    return split_by_fit(search_space(problem, breadth), lambda cfg: config_fits(cfg, problem))
