"""The TopK family as the glue sees it (``torch_flydsl.registry``): eager overrides of
``aten::topk`` and ``aten::topk.values`` (no Inductor seam: Inductor lowers topk to an extern
``aten.topk`` call, which the same override serves). Each call runs the register kernel (k <= 16)
or the radix kernel (``config.choose``; docs/topk.md). Where torch 2.15's in-tree FlyDSL TopK
serves (flydsl 0.3.x), ``torch_flydsl.eager`` registers neither override (the coexistence rule).
Module level holds only the class; its methods import the family's code lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..family import EagerOverride, KernelFamily
from ..vocabulary import Field, UserOp, torch_dtype

_DTYPE = Field("dtype", str, "float32", ("float32", "float16", "bfloat16"),
               {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"})
TOPK = UserOp(
    "topk", "eager torch.topk along the last dim of a contiguous [ROWS, N] tensor, k values",
    (Field("rows"), Field("n"), Field("k")),
    (_DTYPE, Field("largest", bool, True, flag="--smallest", invert=True, help="largest=False"),
     Field("sorted", bool, True, flag="--unsorted", invert=True, help="sorted=False")),
    bench="torch_flydsl.bench.topk",
)
_ARGS = ("self", "k", "dim", "largest", "sorted")


@dataclass
class TopKCall:
    x: Any
    dim: int
    values: Any  # [rows, k] kernel outputs
    indices: Any
    out: tuple  # what the op returns (views of values/indices, or topk.values's out tensors)
    k: int = 1
    largest: bool = True
    sorted: bool = True
    user_out: Optional[tuple] = None  # topk.values: (values, indices) to resize and fill


class TopK(KernelFamily):
    name = "topk"
    package = __package__
    config_class = "TopKConfig"
    eager_overrides = (EagerOverride("topk", "topk"), EagerOverride("topk.values", "topk"))
    user_ops = (TOPK,)

    def problem_for(self, op: str, values: dict):
        return self.explain_problem(values["rows"], values["n"], values["k"], values["dtype"], values["largest"],
                                    values["sorted"])

    def describe(self, op: str, values: dict) -> str:
        return (f"dtype={values['dtype']} {'largest' if values['largest'] else 'smallest'} "
                f"{'sorted' if values['sorted'] else 'unsorted'} (last dim of a contiguous [ROWS, N] tensor)")

    def eager_call(self, target: str, args: tuple, kwargs: dict):
        """``(call, config, problem)`` for an eligible ``topk`` / ``topk.values`` call (outputs
        allocated), or a Decline."""
        from ..base import Decline, TensorMeta
        from .config import configs_for
        from .eligibility import check_out, check_problem
        from .launcher import allocate, shaped

        v = dict(zip(_ARGS, args), **kwargs)
        x, k = v["self"], v["k"]
        dim, largest, sorted_ = v.get("dim", -1), v.get("largest", True), v.get("sorted", True)
        if not isinstance(k, int):
            return Decline("shape", f"k={k!r} is symbolic; the kernel needs a concrete k")
        problem = check_problem(TensorMeta.of(x), k, dim, largest, sorted_)
        if isinstance(problem, Decline):
            return problem
        user_out = None
        if target == "topk.values":
            user_out = (v["values"], v["indices"])
            d = check_out(problem, TensorMeta.of(user_out[0]), TensorMeta.of(user_out[1]))
            if d:
                return d
            if any(t.device != x.device for t in user_out):
                return Decline("device", "out tensors are on another device than the input (PyTorch reports it)")
        fitting, declined = configs_for(problem, "baseline")
        if not fitting:
            return declined[0][1]
        dim %= x.dim()
        values, indices = allocate(x, problem)
        out = user_out if user_out else (shaped(x, dim, values), shaped(x, dim, indices))
        return (TopKCall(x, dim, values, indices, out, problem.k, problem.largest, problem.sorted, user_out),
                fitting[0], problem)

    def run_reference(self, cfg, problem, call: TopKCall) -> None:
        from .reference import reference

        rv, ri = reference(call.x, problem.k, call.dim, problem.largest, problem.sorted)
        call.values.copy_(rv.movedim(call.dim, -1).reshape(call.values.shape))
        call.indices.copy_(ri.movedim(call.dim, -1).reshape(call.indices.shape))

    def run_emulated(self, cfg, problem, call: TopKCall):
        from .launcher import run_emulated

        return run_emulated(cfg, problem, call.x, call.values, call.indices)

    def launch(self, cfg, problem, call: TopKCall) -> None:
        from .launcher import launch

        launch(cfg, problem, call.x, call.values, call.indices)

    def finish(self, call: TopKCall) -> None:
        """``topk.values``: resize and fill the caller's out tensors."""
        if call.user_out is not None:
            from .launcher import shaped

            for dst, src in zip(call.user_out, (call.values, call.indices)):
                res = shaped(call.x, call.dim, src)
                dst.resize_(res.shape)
                dst.copy_(res)

    def explain_problem(self, rows: int, n: int, k: int, dtype="float32", largest: bool = True, sorted: bool = True):
        """A problem (or Decline) for ``python -m torch_flydsl explain topk ROWS N K``."""
        import torch

        from ..base import TensorMeta
        from .eligibility import check_problem

        dt = torch_dtype(_DTYPE.coerce(dtype)) if isinstance(dtype, str) else dtype
        return check_problem(TensorMeta.contiguous((rows, n), dt), k, -1, largest, sorted)

    def explain_fields(self, problem) -> dict:
        """``explain``'s topk answer: the kernel the eager call runs (``register`` / ``radix``)
        and why, and what deterministic mode changes for it."""
        from .config import REGISTER, choose

        algorithm, reason = choose(problem)
        if algorithm == REGISTER:
            ties = "ties in index order in both modes (no atomics, no LDS)"
        elif problem.deterministic:
            ties = "deterministic mode: the gather takes elements in index order (ties in index order)"
        else:
            ties = ("ties at the k-th place taken in lane-strided order (the same on every run; "
                    "index order under torch.use_deterministic_algorithms(True))")
        return {"algorithm": algorithm, "algorithm_reason": reason, "ties": ties}

    def lds_bytes(self, cfg, problem) -> int:
        return cfg.lds_bytes()

    def workgroups(self, cfg, problem) -> int:
        from .launcher import grid_for

        return grid_for(problem, cfg)



FAMILY = TopK()
