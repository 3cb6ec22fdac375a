"""The TopK problem as the kernel sees it: rows of ``n`` unit-stride elements, ``ldx`` apart."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TopKProblem:
    rows: int
    n: int
    k: int
    dtype: torch.dtype
    largest: bool = True
    sorted: bool = True
    ldx: int = 0  # elements between rows (0: n)
    deterministic: bool = False  # torch.use_deterministic_algorithms(True) at the call: ties in index order

    @property
    def row_stride(self) -> int:
        return self.ldx or self.n

    def describe(self) -> str:
        d = str(self.dtype).replace("torch.", "")
        return (f"topk rows={self.rows} n={self.n} k={self.k} {d} "
                f"{'largest' if self.largest else 'smallest'} {'sorted' if self.sorted else 'unsorted'}"
                + (" deterministic" if self.deterministic else ""))
