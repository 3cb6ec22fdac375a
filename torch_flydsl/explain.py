"""Answer "what would FlyDSL do with this GEMM on gfx950, and why?" without a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from .serving import INTREE, PLUGIN, PYTORCH, Serving, who_serves
from .templates.base import Decline, TensorMeta
from .templates.dense_gemm.config import DenseGemmConfig, configs_for
from .templates.dense_gemm.eligibility import check_problem
from .templates.dense_gemm.problem import GemmProblem

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


@dataclass
class Explanation:
    op: str
    problem: Union[GemmProblem, Decline]
    breadth: str
    serving: Serving
    offered: list[DenseGemmConfig] = field(default_factory=list)
    declined: list[tuple[Optional[DenseGemmConfig], Decline]] = field(default_factory=list)

    def to_json(self) -> dict:
        """The machine-readable answer (``explain --json``)."""
        p = self.problem
        return {
            "op": self.op,
            "problem": None if isinstance(p, Decline) else {
                "m": p.m, "n": p.n, "k": p.k, "dtype": str(p.dtype).replace("torch.", ""),
                "layout": p.layout, "bias": p.bias is not None,
            },
            "breadth": self.breadth,
            "served_by": self.serving.served_by,
            "reason": self.serving.reason,
            "offered": [c.key() for c in self.offered],
            "declined": [
                {"config": None if c is None else c.key(), "category": d.category, "reason": d.reason}
                for c, d in self.declined
            ],
        }


def operand_metas(m, n, k, dtype: torch.dtype, layout: str, bias: bool, device_type="cuda"):
    """Contiguous operands for a BLAS-style layout: 't' means stored transposed (column-major)."""
    a = TensorMeta.contiguous((m, k), dtype, device_type)
    if layout[0] == "t":
        a = TensorMeta((m, k), (1, m), dtype, 0, device_type)
    b = TensorMeta.contiguous((k, n), dtype, device_type)
    if layout[1] == "t":
        b = TensorMeta((k, n), (1, k), dtype, 0, device_type)
    out = TensorMeta.contiguous((m, n), dtype, device_type)
    bias_meta = TensorMeta((m, n), (0, 1), dtype, 0, device_type) if bias else None
    return a, b, out, bias_meta


def explain_mm(m, n, k, dtype="bf16", layout="nt", bias=False, breadth: Optional[str] = None) -> Explanation:
    """What a gfx950 process with this install would do with the GEMM: who serves it (the
    plugin, torch's in-tree backend, PyTorch), which configs the plugin offers, and why not
    the others. Assumes FLYDSL is requested under max-autotune."""
    from . import config

    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    breadth = breadth or config.autotune_breadth()
    op = "addmm" if bias else "mm"
    problem = check_problem(*operand_metas(m, n, k, dtype, layout.lower(), bias))
    serving = who_serves(op, assume_gfx950=True)
    ex = Explanation(op, problem, breadth, serving)
    if serving.served_by != PLUGIN:
        category = "coexistence" if serving.served_by == INTREE else "version"
        ex.declined.append((None, Decline(category, serving.reason)))
        return ex
    if isinstance(problem, Decline):
        ex.declined.append((None, problem))
        ex.serving = Serving(op, PYTORCH, str(problem))
        return ex
    ex.offered, ex.declined = configs_for(problem, breadth)
    if not ex.offered:
        ex.serving = Serving(op, PYTORCH, "no FlyDSL config fits this problem")
    return ex
