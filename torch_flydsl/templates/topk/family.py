"""The TopK family as the glue sees it (``torch_flydsl.registry``): eager overrides of
``aten::topk`` and ``aten::topk.values`` (no Inductor seam: compiled graphs keep Inductor's
own topk). Where torch 2.15's in-tree FlyDSL TopK serves (flydsl 0.3.x), ``torch_flydsl.eager``
registers neither override (the coexistence rule). Module level holds only the descriptor;
everything else imports lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...registry import EagerOverride, Family

FAMILY = Family(
    name="topk",
    module=__name__,
    custom_ops=(),
    eager_overrides=(EagerOverride("topk", "topk"), EagerOverride("topk.values", "topk")),
)

_ARGS = ("self", "k", "dim", "largest", "sorted")


def __getattr__(name):
    if name == "KERNEL_VERSION":
        from .config import KERNEL_VERSION

        return KERNEL_VERSION
    raise AttributeError(name)


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


def eager_call(target: str, args: tuple, kwargs: dict):
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


def execute(executor: str, cfg, problem, call: TopKCall) -> None:
    if executor == "reference-standin":
        # Plumbing tests only (named so in every test that uses it): not a FlyDSL kernel.
        from .reference import reference

        rv, ri = reference(call.x, problem.k, call.dim, problem.largest, problem.sorted)
        call.values.copy_(rv.movedim(call.dim, -1).reshape(call.values.shape))
        call.indices.copy_(ri.movedim(call.dim, -1).reshape(call.indices.shape))
    elif executor == "emulator":
        from .launcher import run_emulated

        run_emulated(cfg, problem, call.x, call.values, call.indices)
    else:
        from .launcher import launch

        launch(cfg, problem, call.x, call.values, call.indices)
    if call.user_out is not None:
        from .launcher import shaped

        for dst, src in zip(call.user_out, (call.values, call.indices)):
            res = shaped(call.x, call.dim, src)
            dst.resize_(res.shape)
            dst.copy_(res)


def torch_fallback(call: TopKCall):
    """PyTorch's answer for ``call`` (the eager glue itself chains to PyTorch's kernel; this is
    for callers outside it). Never reached through our override: it runs with it disabled."""
    import torch

    from ...eager import disabled

    with disabled():
        return torch.topk(call.x, call.k, call.dim, largest=call.largest, sorted=call.sorted)


def explain_problem(rows: int, n: int, k: int, dtype="float32", largest: bool = True, sorted: bool = True):
    """A problem (or Decline) for ``python -m torch_flydsl explain topk ROWS N K``."""
    import torch

    from ..base import TensorMeta
    from .eligibility import check_problem

    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return check_problem(TensorMeta.contiguous((rows, n), dt), k, -1, largest, sorted)


def lds_bytes(cfg, problem) -> int:
    return cfg.lds_bytes()


def workgroups(cfg, problem) -> int:
    from .launcher import grid_for

    return grid_for(problem)


def configs_for(problem, breadth: str):
    from .config import configs_for

    return configs_for(problem, breadth)


def curated() -> tuple:
    from .config import CURATED

    return CURATED
