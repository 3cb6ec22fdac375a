"""The words a user names a kernel family's ops with, written once per family and read by every
format that names an op: dispatch tables, precompile shapes files, bench shape files and the
``explain`` CLI.

A ``Field`` is one named value with its type, default and choices, and one validator
(``Field.coerce``) that every format shares. A ``UserOp`` is one op a user names ("mm",
"grouped_mm", ...): its size fields (positional on the command line), its other fields, and
which of them a dispatch-table entry carries (``TableRule``). The family that owns the op
builds problems from those values (``KernelFamily.problem_for``).

Nothing here imports torch at module level (families are read inside ``import torch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()

# Which formats carry a field: a dispatch-table entry, a precompile shapes file, the explain CLI.
TABLE, SPEC, EXPLAIN = "table", "spec", "explain"
ALL_FORMATS = frozenset((TABLE, SPEC, EXPLAIN))


class FieldError(ValueError):
    """A value a field does not take; the message names the field (callers prefix where)."""


def _positive_int(name: str, value: Any, strict: bool, least: int = 1) -> int:
    what = "a positive integer" if least == 1 else f"an integer >= {least}"
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (strict and not isinstance(value, int)):
        raise FieldError(f"{name} must be {what}, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise FieldError(f"{name} must be {what}, got {value!r}") from None
    if number < least:
        raise FieldError(f"{name} must be {what}, got {number}")
    return number


_TEXT_BOOLS = {"true": True, "false": False, "on": True, "off": False, "1": True, "0": False}


@dataclass(frozen=True)
class Field:
    """One named value of a shape: ``kind`` int (positive), str or bool.

    ``choices`` are the canonical values, ``aliases`` other spellings a user may type (they are
    read as their canonical value), ``explain_only`` extra choices that ``explain`` accepts only
    to say why they are declined. ``formats`` lists where the field appears; ``flag`` and
    ``invert`` spell a bool on the command line when ``--<name>`` does not read well
    (``--smallest`` for ``largest=False``)."""

    name: str
    kind: type = int
    default: Any = REQUIRED
    choices: tuple = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    explain_only: tuple = ()
    help: str = ""
    formats: frozenset = ALL_FORMATS
    flag: str = ""
    invert: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        what = "|".join(map(str, self.choices)) if self.choices else self.kind.__name__
        return f"{self.name} ({what})" if self.required else f"{self.name} ({what}, default {self.default})"

    def coerce(self, value: Any, strict: bool = True, explain: bool = False) -> Any:
        """``value`` as this field's canonical value, or a ``FieldError``. ``strict``: a JSON
        value (no "4096" for an int); else text (a CSV cell) may spell an int. ``explain``: what
        ``explain`` asks about, where an empty size (0) is a question the family answers."""
        if self.kind is int:
            value = _positive_int(self.name, value, strict, 0 if explain else 1)
        elif self.kind is bool:
            if not strict and isinstance(value, str) and value.strip().lower() in _TEXT_BOOLS:
                value = _TEXT_BOOLS[value.strip().lower()]  # a CSV cell
            if not isinstance(value, bool):
                raise FieldError(f"{self.name} must be true or false, got {value!r}")
        else:
            if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
                raise FieldError(f"{self.name} must be a non-empty string, got {value!r}")
            value = self.aliases.get(str(value), str(value))
        allowed = self.choices + (self.explain_only if explain else ())
        if self.choices and value not in allowed:
            raise FieldError(f"{self.name} {value!r} is not one of {', '.join(map(str, allowed))}")
        return value


@dataclass(frozen=True)
class TableRule:
    """What a dispatch-table entry of the op holds. Every entry has ``dtype``, ``layout``,
    ``bias``, ``m``, ``n``, ``k`` and ``config``; ``layouts`` are the layouts it may name (the
    op's ``layout`` field decides where it has one), ``bias`` whether it may carry one,
    ``groups`` whether it must name a group count, ``key_dtype`` what a lookup passes as its
    dtype (a ``torch.dtype`` or the format name), and ``spec_defaults`` the values of the op's
    other fields that a table entry stands for when precompile builds it."""

    layouts: tuple = ("nt",)
    bias: bool = True
    groups: bool = False
    key_dtype: Callable[[str], Any] = str
    spec_defaults: Mapping[str, Any] = field(default_factory=dict)


def torch_dtype(name: str):
    """``torch.<name>`` (a table's dtype name as what a lookup passes)."""
    import torch

    return getattr(torch, name)


@dataclass(frozen=True)
class UserOp:
    """One op a user names. ``sizes`` are positional on the command line (and plain fields in
    files), ``fields`` the rest. ``aliases`` are other op names files may use, each meaning this
    op with some fields set (``scaled_mm_v2`` is ``scaled_mm`` with ``v2``). ``table``: how a
    dispatch-table entry of the op reads (None: tables do not name it). ``precompile``: whether
    ``precompile`` builds its kernels ahead of time. ``bench``: the module holding its bench
    suite (``BENCH``), if it has one."""

    name: str
    help: str
    sizes: tuple[Field, ...]
    fields: tuple[Field, ...] = ()
    aliases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    table: Optional[TableRule] = None
    precompile: bool = False
    bench: str = ""

    def all_fields(self, fmt: str) -> tuple[Field, ...]:
        return tuple(f for f in self.sizes + self.fields if fmt in f.formats)

    def field(self, name: str) -> Optional[Field]:
        return next((f for f in self.sizes + self.fields if f.name == name), None)

    def read(self, raw: Mapping[str, Any], fmt: str, preset: Optional[Mapping[str, Any]] = None) -> dict:
        """The values of ``raw`` (a JSON object's fields, ``op`` excluded) for format ``fmt``,
        checked and completed with defaults; ``FieldError`` names what is wrong. For ``EXPLAIN``
        each field takes what ``explain`` asks about (``Field.coerce(explain=True)``)."""
        fields = self.all_fields(fmt)
        known = {f.name for f in fields}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise FieldError(f"unknown field(s) {', '.join(unknown)} for {self.name} (known: op, "
                             f"{', '.join(sorted(known))})")
        values = dict(preset or {})
        for f in fields:
            if f.name in raw:
                values[f.name] = f.coerce(raw[f.name], explain=fmt == EXPLAIN)
            elif f.name in values:
                continue
            elif f.required:
                raise FieldError(f"{f.name} must be given" + (" (a positive integer)" if f.kind is int else ""))
            else:
                values[f.name] = f.default
        return values
