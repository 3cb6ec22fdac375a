"""The compile-time description of one output tile that the GEMM kernel pieces read.

A family's kernel spec is a ``TileSpec`` (the dense kernel's, with its name) or makes one for
the pieces it reuses (the grouped kernel per tile; the scaled kernel with a ``TileShape`` of
16-bit units for its data DMAs and epilogue).
"""

from dataclasses import dataclass
from typing import Protocol, cast

import flydsl.expr as fx
import torch

from .geometry import MMA_K, MMA_M, MMA_N, VEC
from .limits import WAVE_SIZE
from .majors import Major, blas_layout


class TileConfig(Protocol):
    """What the pieces read of a tile config: a family's config (the dense one) or a
    ``TileShape``. ``threads`` is ``m_waves * n_waves * 64``."""

    @property
    def block_m(self) -> int: ...
    @property
    def block_n(self) -> int: ...
    @property
    def block_k(self) -> int: ...
    @property
    def m_waves(self) -> int: ...
    @property
    def n_waves(self) -> int: ...
    @property
    def stages(self) -> int: ...
    @property
    def threads(self) -> int: ...


@dataclass(frozen=True)
class TileShape:
    """A tile as the pieces see it, where no family config says it directly: ``block_k`` in the
    units the DMAs move (the scaled kernel: a K tile row's bytes / 2)."""

    block_m: int
    block_n: int
    block_k: int
    m_waves: int
    n_waves: int
    stages: int

    @property
    def threads(self) -> int:
        return self.m_waves * self.n_waves * WAVE_SIZE


@dataclass(frozen=True)
class TileSpec:
    """Everything that selects one tile's code; the other properties are derived from it."""

    cfg: TileConfig
    dtype: torch.dtype
    a_major: str  # "row" (K contiguous) or "col" (M contiguous)
    b_major: str  # "row" (N contiguous) or "col" (K contiguous)
    has_bias: bool
    # K not a multiple of block_k: the last K tile's DMAs past K read zeros (``Operand.k_bound``).
    k_tail: bool = False

    @property
    def layout(self) -> str:
        # a_major/b_major stay str (the grouped spec hands its b_major over as one); each is "row" or "col".
        return blas_layout(cast(Major, self.a_major), cast(Major, self.b_major))

    # "K-contiguous" per operand, in the (rows, K) view the MMA uses: A is (M, K), B is (N, K).
    @property
    def a_k_contig(self) -> bool:
        return self.a_major == "row"

    @property
    def b_k_contig(self) -> bool:
        return self.b_major == "col"

    @property
    def a_iters(self) -> int:
        """16-byte DMA instructions per thread per A tile."""
        return self.cfg.block_m * self.cfg.block_k // VEC // self.cfg.threads

    @property
    def b_iters(self) -> int:
        return self.cfg.block_n * self.cfg.block_k // VEC // self.cfg.threads

    @property
    def loads_per_tile(self) -> int:
        return self.a_iters + self.b_iters

    @property
    def mfma_per_tile(self) -> int:
        """MFMA instructions per wave per K tile."""
        cfg = self.cfg
        return (cfg.block_m // (cfg.m_waves * MMA_M)) * (cfg.block_n // (cfg.n_waves * MMA_N)) * (cfg.block_k // MMA_K)

    @property
    def rep_m(self) -> int:
        """MFMA blocks per wave along M."""
        return self.cfg.block_m // (self.cfg.m_waves * MMA_M)

    @property
    def c_vectors(self) -> int:
        """16-byte row vectors of the output tile."""
        return self.cfg.block_m * self.cfg.block_n // VEC

    @property
    def c_store_iters(self) -> int:
        return -(-self.c_vectors // self.cfg.threads)

    def elem_type(self):
        return fx.Float16 if self.dtype == torch.float16 else fx.BFloat16
