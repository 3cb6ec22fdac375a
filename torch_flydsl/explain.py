"""Answer "what would FlyDSL do with this GEMM on gfx950, and why?" without a GPU."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .serving import INTREE, PLUGIN, PYTORCH, Serving, who_serves
from .registry import require_family, user_op, user_ops
from .templates.base import Decline
from .templates.vocabulary import EXPLAIN


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
    return require_family(op).lds_bytes(cfg, problem)


def workgroups(op: str, cfg: Any, problem: Any) -> Optional[int]:
    """Workgroups a config launches for this problem, where the family says (None otherwise)."""
    return require_family(op).workgroups(cfg, problem)


@dataclass
class Explanation:
    op: str
    problem: Any  # the family's problem dataclass, or a Decline
    breadth: str
    serving: Serving
    offered: list = field(default_factory=list)  # the family's configs
    declined: list[tuple[Optional[Any], Decline]] = field(default_factory=list)
    user_op: str = ""  # the op as the user named it, and its field values
    values: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # a family's own answer fields (topk: algorithm, reason)

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
            **self.extra,
        }


def _explain(op: str, family, problem, breadth: Optional[str]) -> Explanation:
    """Who serves ``op`` (a serving name) as if on gfx950, and which of ``family``'s configs fit."""
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

    ex.offered, ex.declined = gate(family, problem, *family.configs_for(problem, breadth))
    if not ex.offered:
        ex.serving = Serving(op, PYTORCH, "no FlyDSL config fits this problem")
    return ex


def _value(v: Any) -> Any:
    return str(v).replace("torch.", "") if isinstance(v, torch.dtype) else v


def read_values(op: str, args: tuple = (), kwargs: Optional[dict] = None):
    """``(family, user op, values)`` for ``explain``'s arguments of user op ``op`` (or one of its
    aliases): positional in the op's field order (sizes first), checked by each field's
    validator (``FieldError``, a ValueError, names a bad value; TypeError a wrong call)."""
    found = user_op(op)
    if found is None:
        known = ", ".join(u.name for _, u in user_ops())
        raise ValueError(f"no kernel family knows op {op!r} (known: {known})")
    family, user = found
    fields = user.all_fields(EXPLAIN)
    if len(args) > len(fields):
        raise TypeError(f"explain {op}: {len(args)} positional values for {len(fields)} fields")
    raw = dict(zip((f.name for f in fields), args))
    for name, v in (kwargs or {}).items():
        if name in raw:
            raise TypeError(f"explain {op}: {name} given twice")
        raw[name] = v
    unknown = sorted(set(raw) - {f.name for f in fields})
    if unknown:
        raise TypeError(f"explain {op}: unknown argument(s) {', '.join(unknown)} "
                        f"(fields: {', '.join(f.name for f in fields)})")
    preset = user.aliases.get(op, {})
    missing = [f.name for f in fields if f.required and f.name not in raw and f.name not in preset]
    if missing:
        raise TypeError(f"explain {op}: missing {', '.join(missing)}")
    values = user.read({name: _value(v) for name, v in raw.items()}, EXPLAIN, preset)
    return family, user, values


def explain(op: str, *args: Any, breadth: Optional[str] = None, **kwargs: Any) -> Explanation:
    """What a gfx950 process with this install would do with user op ``op`` (``mm``,
    ``scaled_mm``, ... every family's ``user_ops``): who serves it (the plugin, torch's in-tree
    backend, PyTorch), which configs the plugin offers, and why not the others. Arguments are
    the op's fields (``python -m torch_flydsl explain OP --help`` lists them). Assumes FLYDSL is
    requested under max-autotune. ``explain_<op>(...)`` is the same call."""
    family, user, values = read_values(op, args, kwargs)
    return explain_values(family, user, values, breadth)


def explain_values(family, user, values: dict, breadth: Optional[str] = None) -> Explanation:
    """``explain`` for values ``read_values`` checked."""
    serving = family.serving_for(user.name, values)
    ex = _explain(serving, family, family.problem_for(user.name, values), breadth)
    ex.user_op, ex.values = user.name, values
    fields = getattr(family, "explain_fields", None)  # topk: which kernel serves, and why
    if fields is not None and ex.serving.served_by == PLUGIN:
        ex.extra = fields(ex.problem)
    return ex


def __getattr__(name: str):
    """``explain_mm``, ``explain_topk``, ...: ``explain`` bound to one user op."""
    if name.startswith("explain_") and user_op(name[len("explain_"):]) is not None:
        return functools.partial(explain, name[len("explain_"):])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
