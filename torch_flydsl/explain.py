"""Answer "what would FlyDSL do with this GEMM on gfx950, and why?" without a GPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .serving import INTREE, PLUGIN, PYTORCH, Serving, who_serves
from .templates.base import Decline
from .registry import family_for

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


def _json_value(name: str, value: Any) -> Any:
    if name == "bias":
        return value is not None and value is not False  # dense: None/"row"; scaled: bool
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    return value


def problem_json(problem: Any) -> Optional[dict]:
    """A family's problem dataclass as JSON: its fields, dtypes by name, ``bias`` as a bool. A
    problem with a BLAS ``layout`` name (dense GEMM) gives it in place of its two majors."""
    if problem is None or isinstance(problem, Decline):
        return None
    layout = getattr(problem, "layout", None)
    out = {}
    for f in dataclasses.fields(problem):
        if layout is not None and f.name in ("a_major", "b_major"):
            if f.name == "a_major":
                out["layout"] = layout
            continue
        out[f.name] = _json_value(f.name, getattr(problem, f.name))
    return out


def lds_bytes(op: str, cfg: Any, problem: Any) -> int:
    """A config's static LDS for this problem (the family knows what it depends on)."""
    return family_for(op).impl().lds_bytes(cfg, problem)


def workgroups(op: str, cfg: Any, problem: Any) -> Optional[int]:
    """Workgroups a config launches for this problem, where the family says (None otherwise)."""
    fn = getattr(family_for(op).impl(), "workgroups", None)
    return None if fn is None else fn(cfg, problem)


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
        return {
            "op": self.op,
            "problem": problem_json(self.problem),
            "breadth": self.breadth,
            "served_by": self.serving.served_by,
            "reason": self.serving.reason,
            "offered": [c.key() for c in self.offered],
            "declined": [
                {"config": None if c is None else c.key(), "category": d.category, "reason": d.reason}
                for c, d in self.declined
            ],
        }


def _explain(op: str, impl, problem, breadth: Optional[str]) -> Explanation:
    """Who serves ``op`` (a serving name) as if on gfx950, and which of ``impl``'s configs fit."""
    from . import config

    breadth = breadth or config.autotune_breadth()
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
    from .deploy.run_only import gate

    ex.offered, ex.declined = gate(impl, problem, *impl.configs_for(problem, breadth))
    if not ex.offered:
        ex.serving = Serving(op, PYTORCH, "no FlyDSL config fits this problem")
    return ex


def explain_mm(m, n, k, dtype="bf16", layout="nt", bias=False, breadth: Optional[str] = None) -> Explanation:
    """What a gfx950 process with this install would do with the GEMM: who serves it (the
    plugin, torch's in-tree backend, PyTorch), which configs the plugin offers, and why not
    the others. Assumes FLYDSL is requested under max-autotune."""
    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    op = "addmm" if bias else "mm"
    impl = family_for(op).impl()
    return _explain(op, impl, impl.explain_problem(op, m, n, k, dtype, layout.lower()), breadth)


def explain_scaled_mm(m, n, k, dtype: str = "mxfp8", out_dtype="bf16", bias: bool = False, v2: bool = False,
                      breadth: Optional[str] = None) -> Explanation:
    """The same answer for an MX ``torch._scaled_mm`` (``v2``: ``F.scaled_mm`` /
    ``torch._scaled_mm_v2`` with BlockWise1x32 NO_SWIZZLE scales) in its TN layout with
    unswizzled E8M0 scales. ``dtype``: mxfp8, mxfp8-e5m2, mxfp4 or w4a8; anything else (``fp8``:
    float32 tensor- or row-wise scales) is declined with the reason."""
    if isinstance(out_dtype, str):
        out_dtype = DTYPES[out_dtype.lower()]
    impl = family_for("scaled_mm").impl()
    problem = impl.explain_problem("scaled_mm_v2" if v2 else "scaled_mm", m, n, k, dtype, out_dtype=out_dtype,
                                   bias=bias)
    return _explain("scaled_mm_v2" if v2 else "scaled_mm", impl, problem, breadth)


def explain_grouped_mm(m, n, k, groups: int, dtype="bf16", b_major: str = "col",
                       breadth: Optional[str] = None) -> Explanation:
    """The same answer for ``torch._grouped_mm``'s MoE forward: A ``[m, k]`` row-major (``m``:
    the tokens of all ``groups`` experts), B ``[groups, k, n]`` with each expert's matrix
    ``b_major`` ("col": stored ``[groups, n, k]``, the usual weight layout; "row"), int32
    ``offs [groups]`` on the device, no bias."""
    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    impl = family_for("grouped_mm").impl()
    problem = impl.explain_problem("grouped_mm", m, n, k, dtype, groups=groups, b_major=b_major.lower())
    return _explain("grouped_mm", impl, problem, breadth)


def explain_topk(rows: int, n: int, k: int, dtype="fp32", largest: bool = True, sorted: bool = True,
                 breadth: Optional[str] = None) -> Explanation:
    """The same answer for an eager ``torch.topk`` along the last dim of a contiguous
    ``[rows, n]`` tensor (the TopK family's eager override)."""
    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    impl = family_for("topk").impl()
    return _explain("topk", impl, impl.explain_problem(rows, n, k, dtype, largest, sorted), breadth)


def explain_rms_norm(rows: int, n: int, dtype="bf16", weight: bool = True, breadth: Optional[str] = None) -> Explanation:
    """The same answer for an eager ``F.rms_norm`` over the last dim of a contiguous ``[rows, n]``
    tensor (the RMSNorm family's ``_fused_rms_norm`` override; eps=None)."""
    if isinstance(dtype, str):
        dtype = DTYPES[dtype.lower()]
    impl = family_for("rms_norm").impl()
    return _explain("rms_norm", impl, impl.explain_problem(rows, n, dtype, weight), breadth)
