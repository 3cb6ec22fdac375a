"""Answer "what would FlyDSL do with this GEMM on gfx950, and why?" without a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from .templates.base import Decline, TensorMeta
from .templates.dense_gemm.config import DenseGemmConfig, configs_for
from .templates.dense_gemm.eligibility import check_problem
from .templates.dense_gemm.problem import GemmProblem

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


@dataclass
class Explanation:
    problem: Union[GemmProblem, Decline]
    breadth: str
    offered: list[DenseGemmConfig] = field(default_factory=list)
    declined: list[tuple[DenseGemmConfig, Decline]] = field(default_factory=list)


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
    from . import config

    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    breadth = breadth or config.autotune_breadth()
    problem = check_problem(*operand_metas(m, n, k, dtype, layout.lower(), bias))
    ex = Explanation(problem, breadth)
    if isinstance(problem, Decline):
        return ex
    ex.offered, ex.declined = configs_for(problem, breadth)
    return ex
