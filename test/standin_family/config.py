"""The stand-in family's configs (plumbing tests only: no kernel is built from them)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_flydsl.templates.base import Decline, split_by_fit

KERNEL_VERSION = "standin-1"


@dataclass(frozen=True)
class StandinConfig:
    block: int

    threads = 64

    @property
    def lds_bytes(self) -> int:
        return 4 * self.block

    def key(self) -> str:
        return f"standin_b{self.block}"

    @classmethod
    def from_key(cls, key: str) -> "StandinConfig":
        if not key.startswith("standin_b") or not key[len("standin_b"):].isdigit():
            raise ValueError(f"{key!r} is not a stand-in config key (standin_b<block>)")
        return cls(int(key[len("standin_b"):]))

    def static_problems(self) -> list:
        return [] if self.block in (16, 32, 64) else [f"block {self.block} is not 16, 32 or 64"]


CURATED = (StandinConfig(16), StandinConfig(32), StandinConfig(64))


def config_fits(cfg: StandinConfig, problem) -> "Decline | None":
    if problem.k % cfg.block:
        return Decline("shape", f"{cfg.key()}: K={problem.k} is not a multiple of {cfg.block}")
    return None


def configs_for(problem, breadth: str):
    return split_by_fit(CURATED[:1] if breadth == "baseline" else CURATED, lambda c: config_fits(c, problem))
