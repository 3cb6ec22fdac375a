"""Answer "what would FlyDSL do with this GEMM on gfx950, and why?" without a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .serving import INTREE, PLUGIN, PYTORCH, Serving, who_serves
from .templates.base import Decline
from .registry import family_for

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


@dataclass
class Explanation:
    op: str
    problem: Any  # the family's problem dataclass, or a Decline
    breadth: str
    serving: Serving
    offered: list = field(default_factory=list)  # the family's configs
    declined: list[tuple[Optional[Any], Decline]] = field(default_factory=list)

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


def explain_mm(m, n, k, dtype="bf16", layout="nt", bias=False, breadth: Optional[str] = None) -> Explanation:
    """What a gfx950 process with this install would do with the GEMM: who serves it (the
    plugin, torch's in-tree backend, PyTorch), which configs the plugin offers, and why not
    the others. Assumes FLYDSL is requested under max-autotune."""
    from . import config

    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    breadth = breadth or config.autotune_breadth()
    op = "addmm" if bias else "mm"
    impl = family_for(op).impl()
    problem = impl.explain_problem(op, m, n, k, dtype, layout.lower())
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
    ex.offered, ex.declined = impl.configs_for(problem, breadth)
    if not ex.offered:
        ex.serving = Serving(op, PYTORCH, "no FlyDSL config fits this problem")
    return ex
