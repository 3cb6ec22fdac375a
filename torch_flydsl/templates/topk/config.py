"""Configurations of the TopK family's two kernels and which one serves a call.

* ``radix`` (``kernel.py``): a workgroup per row, 4 radix passes, survivors gathered into
  ``k_pad`` LDS slots (a power of two >= k) and only those sorted. Any k up to ``MAX_K``.
* ``register`` (``register_kernel.py``): a wave64 per row (two rows per 128-thread workgroup),
  a sorted top-``k_pad`` list per lane in VGPRs, a butterfly merge. k up to ``REG_MAX_K``.

``baseline_for`` picks per call: the register kernel for k <= ``REG_MAX_K`` (the range where
``benchmarks/topk_model.py`` models it faster, see ``docs/topk.md``), the radix kernel above.
Both are offered under autotuning where both fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..base import Decline, split_by_fit

KERNEL_VERSION = "topk-2"  # 2: the register kernel, the deterministic (index-order) radix gather
KEY_PREFIX = "topk_"
MAX_N = 32768  # the gather packs per-thread counts into 16-bit fields of one scan
MAX_K = 1024  # survivors live in LDS and are sorted by one bitonic network
THREADS = (256, 512)  # 1024 threads: SGPR spills in the unrolled bitonic network
REG_THREADS = 128  # the register kernel: two wave64s, one row each
REG_MAX_K = 16  # its per-lane list: 2 * k_pad VGPRs, a merge network of k_pad/2 * log2(k_pad) steps
REG_MAX_BYTES = 2**31  # its per-row buffer resources: a row's byte offset must fit 31 bits
RADIX, REGISTER = "radix", "register"
LDS_LIMIT = 160 * 1024
WAVE = 64
BINS = 256


def k_pad_for(k: int) -> int:
    """The radix path's survivor slots for k: a power of two >= k, at least 4 (16-byte LDS arrays)."""
    return max(4, 1 << max(k - 1, 0).bit_length())


def reg_k_pad_for(k: int) -> int:
    """The register path's per-lane list length for k: a power of two >= k."""
    return 1 << max(k - 1, 0).bit_length()


@dataclass(frozen=True)
class TopKConfig:
    threads: int = 256
    k_pad: int = 1
    algorithm: str = RADIX

    def key(self) -> str:
        if self.algorithm == REGISTER:
            return f"{KEY_PREFIX}t{self.threads}_kp{self.k_pad}_reg"
        return f"{KEY_PREFIX}t{self.threads}_kp{self.k_pad}"

    @classmethod
    def from_key(cls, key: str) -> "TopKConfig":
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"not a TopK config key: {key!r}")
        try:
            parts = key[len(KEY_PREFIX):].split("_")
            algorithm = RADIX
            if parts[-1] == "reg":
                algorithm, parts = REGISTER, parts[:-1]
            t, kp = parts
            if not (t.startswith("t") and kp.startswith("kp")):
                raise ValueError(key)
            return cls(int(t[1:]), int(kp[2:]), algorithm)
        except ValueError:
            raise ValueError(f"not a TopK config key: {key!r}") from None

    def lds_bytes(self) -> int:
        if self.algorithm == REGISTER:
            return 0
        waves = self.threads // WAVE
        r16 = lambda b: -(-b // 16) * 16  # noqa: E731  (every LDS array starts 16-byte aligned)
        return r16(waves * BINS * 4) + 2 * r16(self.k_pad * 4) + r16(waves * 4) + 16

    def static_problems(self) -> list[str]:
        if self.algorithm == REGISTER:
            p = []
            if self.threads != REG_THREADS:
                p.append(f"threads {self.threads}: the register kernel runs {REG_THREADS} (two waves, a row each)")
            if self.k_pad < 1 or self.k_pad & (self.k_pad - 1) or self.k_pad > REG_MAX_K:
                p.append(f"k_pad {self.k_pad} is not a power of two in [1, {REG_MAX_K}]")
            return p
        p = []
        if self.algorithm != RADIX:
            p.append(f"unknown algorithm {self.algorithm!r} ({RADIX}, {REGISTER})")
        if self.threads not in THREADS:
            p.append(f"threads {self.threads} is not one of {THREADS}")
        if self.k_pad < 1 or self.k_pad & (self.k_pad - 1) or self.k_pad > MAX_K:
            p.append(f"k_pad {self.k_pad} is not a power of two in [1, {MAX_K}]")
        if self.lds_bytes() > LDS_LIMIT:
            p.append(f"needs {self.lds_bytes()} bytes of LDS (gfx950 has {LDS_LIMIT})")
        return p


# The variants the compile test builds (every threads count, the k_pad extremes, both kernels).
CURATED = (TopKConfig(256, 4), TopKConfig(256, 8), TopKConfig(256, 64), TopKConfig(256, 1024), TopKConfig(512, 1024),
           TopKConfig(REG_THREADS, 1, REGISTER), TopKConfig(REG_THREADS, 8, REGISTER),
           TopKConfig(REG_THREADS, 16, REGISTER))


def radix_for(problem) -> TopKConfig:
    """The radix config: 256 threads (one bin per thread) for rows up to 8192 elements, 512
    above (more loads in flight per row); ``k_pad`` from k."""
    return TopKConfig(256 if problem.n <= 8192 else 512, k_pad_for(problem.k))


def register_for(problem) -> TopKConfig:
    return TopKConfig(REG_THREADS, reg_k_pad_for(problem.k), REGISTER)


def register_decline(problem) -> Optional[str]:
    """Why the register kernel does not serve ``problem`` (None: it does)."""
    if problem.k > REG_MAX_K:
        return f"k={problem.k} > {REG_MAX_K}: the register kernel keeps at most {REG_MAX_K} candidates per lane"
    span = ((problem.rows - 1) * problem.row_stride + problem.n) * problem.dtype.itemsize
    if span >= REG_MAX_BYTES:
        return f"the input spans {span} bytes: the register kernel's row buffers address at most 2 GiB"
    return None


def choose(problem) -> tuple[str, str]:
    """``(algorithm, reason)``: which kernel serves ``problem`` with no autotuning, and why."""
    why_not = register_decline(problem)
    if why_not is None:
        return REGISTER, (f"k={problem.k} <= {REG_MAX_K}: a wave per row keeps a sorted top-{reg_k_pad_for(problem.k)} "
                          "per lane in registers and reads the row once (the radix kernel reads it 6 times: 4 histogram passes, count, place)")
    return RADIX, why_not + "; the radix kernel selects by 4 histogram passes and sorts only its k_pad survivors"


def baseline_for(problem) -> TopKConfig:
    """The one config offered with no autotuning: the register kernel where it serves, else radix."""
    return register_for(problem) if choose(problem)[0] == REGISTER else radix_for(problem)


def search_space(problem, breadth: str = "curated") -> list[TopKConfig]:
    if breadth == "baseline":
        return [baseline_for(problem)]
    if breadth in ("curated", "exhaustive"):
        radix = [TopKConfig(t, k_pad_for(problem.k)) for t in THREADS]
        return ([register_for(problem)] if register_decline(problem) is None else []) + radix
    raise ValueError(f"unknown search-space breadth {breadth!r} (baseline, curated, exhaustive)")


def config_fits(cfg: TopKConfig, problem) -> Optional[Decline]:
    static = cfg.static_problems()
    if static:
        return Decline("config", f"{cfg.key()}: " + "; ".join(static))
    if cfg.k_pad < problem.k:
        return Decline("config", f"{cfg.key()}: k_pad {cfg.k_pad} holds fewer than k={problem.k} survivors")
    if cfg.algorithm == REGISTER:
        why_not = register_decline(problem)
        if why_not:
            return Decline("config", f"{cfg.key()}: {why_not}")
    return None


def configs_for(problem, breadth: str = "baseline"):
    return split_by_fit(search_space(problem, breadth), lambda cfg: config_fits(cfg, problem))
