"""The dense GEMM problem as the kernel family sees it: ``out = alpha * (A @ B) + beta * bias``.

``A`` is ``[M, K]``, ``B`` is ``[K, N]``, ``out`` is ``[M, N]`` row-major. Each input is either
row-major ("n") or column-major ("t"); the pair names the layout the way BLAS does (``nt`` is
``A @ W.T`` with ``W`` stored ``[N, K]`` row-major, the ``nn.Linear`` case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from ..gemm.majors import Major, blas_layout, major_of  # noqa: F401  (major_of: the family reads it here)

BiasKind = Optional[Literal["row"]]  # "row": one value per output column, [N] or [M, N] stride (0, 1)


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: torch.dtype  # inputs and output share it (bf16 or fp16)
    a_major: Major = "row"
    b_major: Major = "row"
    bias: BiasKind = None

    @property
    def layout(self) -> str:
        """BLAS-style layout name: first letter for A, second for B; n = row-major, t = col-major."""
        return blas_layout(self.a_major, self.b_major)

    @classmethod
    def from_layout(cls, m, n, k, dtype, layout="nt", bias: BiasKind = None) -> "GemmProblem":
        g: dict[str, Major] = {"n": "row", "t": "col"}
        return cls(m, n, k, dtype, g[layout[0]], g[layout[1]], bias)


@dataclass(frozen=True)
class DynamicM:
    """A GEMM whose M is known only at run time (``torch.compile`` dynamic shapes).

    M is a kernel argument, so one compiled kernel per config serves every M. ``at_hint`` is the
    problem at the compiler's size hint for M (what autotuning times); ``m`` names M's symbolic
    expression; every M in ``m_min..m_max`` must be served by an offered config.
    """

    at_hint: GemmProblem
    m: str
    m_min: int
    m_max: int
