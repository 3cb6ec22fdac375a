"""The per-shape dispatch table: which FlyDSL config serves one GEMM shape, for callers that
pick a kernel per call without Inductor (the vLLM re-route, eager callers).

A small, versioned, human-readable JSON file::

    {
      "format": "torch-flydsl-dispatch-table",
      "version": 1,
      "arch": "gfx950",
      "entries": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": false,
         "m": 16, "n": 4096, "k": 4096, "config": "m16n64k128_w1x4_s3_g0_sk4",
         "source": "bench", "us": 4.6}
      ]
    }

- ``op``: ``mm`` (dense GEMM; ``bias: true`` is the addmm / ``F.linear`` with bias case), or
  ``scaled_mm`` (the MX scaled GEMM: an MXFP8 / MXFP4 linear layer, ``x_q @ W_q.T`` with E8M0
  block scales; bf16 or fp16 output, the same config for both), or ``grouped_mm`` (the MoE
  forward's grouped GEMM, ``x_sorted @ W[e].T`` per expert; ``m`` counts routed rows, tokens x
  top-k, and ``groups`` is the number of experts), or ``scaled_grouped_mm`` (the same for an
  MXFP8 MoE: e4m3 activations and experts with E8M0 block scales; no bias).
- ``dtype``: ``mm`` and ``grouped_mm``: ``bfloat16`` or ``float16``; ``scaled_mm``: the MX
  format of activations x weights, ``mxfp8`` (e4m3 x e4m3), ``mxfp8-e5m2``, ``mxfp4`` (e2m1 x
  e2m1) or ``w4a8``; ``scaled_grouped_mm``: ``mxfp8``.
- ``groups``: ``grouped_mm`` and ``scaled_grouped_mm`` only (and required there).
- ``layout``: BLAS-style, first letter A then B, ``n`` row-major, ``t`` column-major: ``nt`` is
  ``x @ W.T`` with ``W`` stored ``[N, K]`` (every ``nn.Linear``; the only layout of ``scaled_mm``
  and the grouped ops).
- ``m``: one M, or ``[lo, hi]`` for every M in that inclusive range (exact entries win).
- ``config``: the family's config key (``python -m torch_flydsl explain mm M N K`` lists them).
- ``source`` (``hand``, ``bench``, ``inductor``, ``record``) and ``us`` are informative.

The file is written by benchmarks and autotuning runs and by hand, read by ``load``, and
selected for a process with ``TORCH_FLYDSL_DISPATCH_TABLE=FILE`` (``active()``). A lookup is one
dict probe on a table that is never mutated after loading (thread-safe without a lock; a reload
swaps the whole table in one assignment).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from .templates.vocabulary import TABLE

FORMAT = "torch-flydsl-dispatch-table"
VERSION = 1
SOURCES = ("hand", "bench", "inductor", "record", "precompile")
ENV = "TORCH_FLYDSL_DISPATCH_TABLE"


class TableError(ValueError):
    """A dispatch table file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Entry:
    op: str
    dtype: str
    layout: str
    bias: bool
    m: Union[int, tuple[int, int]]
    n: int
    k: int
    config: str
    source: str = "hand"
    us: Optional[float] = None
    groups: int = 0  # grouped_mm: the experts; 0 for the other ops

    def to_json(self) -> dict:
        d = asdict(self)
        d["m"] = list(self.m) if isinstance(self.m, tuple) else self.m
        if d["us"] is None:
            del d["us"]
        if not d["groups"]:
            del d["groups"]
        return d

    @property
    def m_range(self) -> tuple[int, int]:
        return self.m if isinstance(self.m, tuple) else (self.m, self.m)


def table_ops() -> dict:
    """``{op: (family, user op)}`` for every user op a table may name (its ``TableRule``)."""
    from .registry import user_ops

    return {u.name: (f, u) for f, u in user_ops() if u.table is not None}


def _key_dtype(op: str, name: str):
    """What a lookup passes as ``dtype`` for ``op`` (a ``torch.dtype``, or a format name)."""
    return table_ops()[op][1].table.key_dtype(name)


def _check_config(family, key: str) -> Optional[str]:
    """Why ``key`` is not a config of ``family`` (None: it is)."""
    try:
        cfg = family.config_from_key(key)
    except ValueError as e:
        return str(e)
    problems = cfg.static_problems()
    return "; ".join(problems) if problems else None


def _shape_fields(op: str, user, rule, raw: dict, where: str) -> tuple:
    """``(dtype, layout, bias, groups)`` of an entry of ``op``, checked by the op's own fields."""
    from .templates.vocabulary import FieldError

    def one(name: str, fallback, allowed=None):
        field = user.field(name)
        value = raw.get(name, field.default if field is not None else fallback)
        try:
            if field is not None and TABLE in field.formats:
                value = field.coerce(value)
            if allowed is not None and value not in allowed:
                raise FieldError(f"{name} {value!r} is not one of {', '.join(allowed)}")
        except FieldError as e:
            raise TableError(f"{where}: {e} (op {op})") from None
        return value

    dtype = one("dtype", None)
    layout = one("layout", "nt", rule.layouts)
    bias = raw.get("bias", False)
    if not isinstance(bias, bool):
        raise TableError(f"{where}: bias must be true or false, got {bias!r}")
    if bias and not rule.bias:
        raise TableError(f"{where}: {op} entries have no bias")
    groups = raw.get("groups", 0)
    if rule.groups and not (isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1):
        raise TableError(f"{where}: {op} needs groups, a positive integer (the experts), got {groups!r}")
    if not rule.groups and "groups" in raw:
        raise TableError(f"{where}: groups is a field of entries of {', '.join(_grouped_ops()) or 'no op'} only")
    return dtype, layout, bias, groups


def _grouped_ops() -> list:
    return [op for op, (_, u) in table_ops().items() if u.table.groups]


def _entry(raw, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise TableError(f"{where}: an entry must be a JSON object, got {type(raw).__name__}")
    known = {"op", "dtype", "layout", "bias", "m", "n", "k", "config", "source", "us", "groups"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise TableError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    missing = [f for f in ("op", "dtype", "m", "n", "k", "config") if f not in raw]
    if missing:
        raise TableError(f"{where}: missing field(s) {', '.join(missing)}")
    ops = table_ops()
    op = raw["op"]
    if op not in ops:
        raise TableError(f"{where}: op {op!r} is not one of {', '.join(ops)}")
    family, user = ops[op]
    dtype, layout, bias, groups = _shape_fields(op, user, user.table, raw, where)
    m = raw["m"]
    if isinstance(m, list) and len(m) == 2 and all(isinstance(x, int) for x in m) and 1 <= m[0] <= m[1]:
        m = (m[0], m[1])
    elif not (isinstance(m, int) and not isinstance(m, bool) and m >= 1):
        raise TableError(f"{where}: m must be a positive integer or [lo, hi] with 1 <= lo <= hi, got {m!r}")
    for name in ("n", "k"):
        v = raw[name]
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise TableError(f"{where}: {name} must be a positive integer, got {v!r}")
    why = _check_config(family, raw["config"]) if isinstance(raw["config"], str) else "not a string"
    if why:
        raise TableError(f"{where}: config {raw['config']!r}: {why}")
    source = raw.get("source", "hand")
    if source not in SOURCES:
        raise TableError(f"{where}: source {source!r} is not one of {', '.join(SOURCES)}")
    us = raw.get("us")
    if us is not None and not isinstance(us, (int, float)):
        raise TableError(f"{where}: us must be a number, got {us!r}")
    return Entry(op, dtype, layout, bias, m, raw["n"], raw["k"], raw["config"], source,
                 None if us is None else float(us), groups)


class DispatchTable:
    """An immutable set of entries with O(1) lookup by exact shape (then by M range)."""

    def __init__(self, entries: Iterable[Entry] = (), arch: str = "gfx950", path: Optional[Path] = None):
        self.arch = arch
        self.path = path
        self.entries: tuple[Entry, ...] = tuple(entries)
        exact: dict = {}
        ranges: dict = {}
        weights: set = set()
        for e in self.entries:
            head = (e.op, _key_dtype(e.op, e.dtype), e.layout, e.bias)
            weights.add((e.op, head[1], e.n, e.k, e.groups))
            if isinstance(e.m, tuple):
                ranges.setdefault(head + (e.n, e.k, e.groups), []).append((e.m[0], e.m[1], e.config))
            else:
                key = head + (e.m, e.n, e.k, e.groups)
                if key in exact and exact[key] != e.config:
                    where = f"{path}: " if path else ""
                    raise TableError(f"{where}two entries for {e.op} {e.dtype} {e.layout} bias={e.bias} "
                                     f"M={e.m} N={e.n} K={e.k}{f' G={e.groups}' if e.groups else ''} name "
                                     f"different configs ({exact[key]}, {e.config})")
                exact[key] = e.config
        self._exact = exact
        self._ranges = {k: tuple(sorted(v)) for k, v in ranges.items()}
        self._weights = frozenset(weights)

    def __len__(self) -> int:
        return len(self.entries)

    def named_weights(self) -> frozenset:
        """Every ``(op, dtype, n, k, groups)`` weight some entry names (``dtype`` as a lookup
        passes it)."""
        return self._weights

    def names_weight(self, op: str, dtype, n: int, k: int, groups: int = 0) -> bool:
        """Whether any entry (any M, bias or not) is for an ``[N, K]`` weight of ``op`` and
        ``dtype``: what a caller that decides once per layer, before M is known, asks."""
        return (op, dtype, n, k, groups) in self._weights

    def lookup(self, op: str, dtype, layout: str, bias: bool, m: int, n: int, k: int,
               groups: int = 0) -> Optional[str]:
        """The config key for this GEMM, or None. ``dtype``: a ``torch.dtype`` for ``mm`` and
        ``grouped_mm``, the MX format name (``"mxfp8"``, ...) for ``scaled_mm``; ``groups``: the
        experts of a ``grouped_mm`` (0 otherwise)."""
        hit = self._exact.get((op, dtype, layout, bias, m, n, k, groups))
        if hit is not None or not self._ranges:
            return hit
        for lo, hi, cfg in self._ranges.get((op, dtype, layout, bias, n, k, groups), ()):
            if lo <= m <= hi:
                return cfg
        return None

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "arch": self.arch,
                "entries": [e.to_json() for e in self.entries]}

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"

    def save(self, path: Union[str, Path], mode: Optional[int] = None) -> Path:
        """Write atomically (a reader, or a crash, never leaves half a file); ``mode``: the
        file's permission bits (default: the old file's)."""
        from .deploy.files import atomic_write

        return atomic_write(path, self.text(), mode)

    def merged(self, newer: Iterable[Entry]) -> "DispatchTable":
        """This table with ``newer`` entries replacing any entry for the same shape."""
        newer = list(newer)
        shapes = {(e.op, e.dtype, e.layout, e.bias, e.m, e.n, e.k, e.groups) for e in newer}
        kept = [e for e in self.entries if (e.op, e.dtype, e.layout, e.bias, e.m, e.n, e.k, e.groups) not in shapes]
        return DispatchTable(kept + newer, self.arch, self.path)


def parse(doc, where: str = "<table>") -> DispatchTable:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TableError(f"{where}: not a torch-flydsl dispatch table (its \"format\" must be {FORMAT!r})")
    version = doc.get("version")
    if version != VERSION:
        raise TableError(f"{where}: dispatch table version {version!r}; this torch_flydsl reads version {VERSION}")
    arch = doc.get("arch", "gfx950")
    if arch != "gfx950":
        raise TableError(f"{where}: arch {arch!r}; torch_flydsl kernels are built for gfx950")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise TableError(f"{where}: \"entries\" must be a list")
    return DispatchTable([_entry(raw, f"{where}: entries[{i}]") for i, raw in enumerate(entries)], arch,
                         Path(where) if where != "<table>" else None)


def merge_into(path: Union[str, Path], entries: Iterable[Entry], mode: Optional[int] = None,
               on_unusable: Optional[Callable[[TableError], None]] = None,
               prune: Optional[Callable[[list], list]] = None) -> DispatchTable:
    """Merge ``entries`` into the table file ``path`` (``DispatchTable.merged``), re-reading it
    under its lock so that concurrent writers keep each other's entries; ``prune``: what to keep
    of the file's old entries first (default: all). A file that is not a usable table is
    replaced, after ``on_unusable(error)`` (default: raise the ``TableError``)."""
    from .deploy.files import update

    entries, target = list(entries), Path(path)
    result: list = []

    def rewrite() -> str:
        try:
            old = load(target) if target.is_file() and target.stat().st_size else DispatchTable()
        except TableError as e:
            if on_unusable is None:
                raise
            on_unusable(e)
            old = DispatchTable()
        if prune is not None:
            old = DispatchTable(prune(list(old.entries)), old.arch, old.path)
        result.append(old.merged(entries))
        return result[0].text()

    update(target, rewrite, mode)
    return result[0]


def load(path: Union[str, Path]) -> DispatchTable:
    """Read and validate a table file; ``TableError`` says what is wrong and where."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TableError(f"{path}: cannot read the dispatch table ({type(e).__name__}: {e})") from e
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not JSON ({e})") from e
    return parse(doc, str(path))


# -- the process's table (TORCH_FLYDSL_DISPATCH_TABLE) ---------------------------------------

_EMPTY = DispatchTable()
_active: tuple = ((None, None), _EMPTY)  # (the settings it was read for, table): replaced whole
_lock = threading.Lock()
CACHE_DIR_ENV = "TORCH_FLYDSL_CACHE_DIR"
FILE_NAME = "dispatch_table.json"


def active() -> DispatchTable:
    """The process's table: the file ``TORCH_FLYDSL_DISPATCH_TABLE`` names, else
    ``$TORCH_FLYDSL_CACHE_DIR/dispatch_table.json`` when it exists, else empty; read once per
    setting. A file that cannot be used gives an empty table and one warning: a bad table must
    never break a server, it only leaves every shape on its usual path."""
    settings = _settings()
    current = _active
    if current[0] == settings:
        return current[1]
    return _load_active(settings)


# os.environ.get encodes the key on every call (~0.5-1.5 us here, most of a lookup's budget);
# os.environ's own mapping of encoded names answers the same question in ~50 ns. The values stay
# bytes in the settings tuple and are decoded only when a table is (re)loaded.
try:
    _data = getattr(os.environ, "_data", None)  # CPython's private map (os.environ's own storage)
    _ENV_DATA = _data if os.supports_bytes_environ and isinstance(_data, dict) else None
except AttributeError:  # another Python's os.environ
    _ENV_DATA = None
_KEYS = (os.fsencode(ENV), os.fsencode(CACHE_DIR_ENV))


def _settings() -> tuple:
    if _ENV_DATA is not None:
        return _ENV_DATA.get(_KEYS[0]), _ENV_DATA.get(_KEYS[1])
    return os.environ.get(ENV), os.environ.get(CACHE_DIR_ENV)


def _path_for(settings) -> Optional[str]:
    named, cache_dir = (os.fsdecode(v) if isinstance(v, bytes) else v for v in settings)
    if named:
        return named
    if cache_dir and (Path(cache_dir) / FILE_NAME).is_file():
        return str(Path(cache_dir) / FILE_NAME)
    return None


def _load_active(settings) -> DispatchTable:
    global _active
    with _lock:
        if _active[0] == settings:
            return _active[1]
        table = _EMPTY
        path = _path_for(settings)
        if path:
            try:
                table = load(path)
            except TableError as e:
                from torch_flydsl_boot import warn_once

                warn_once(f"{ENV}={path}", f"{ENV}: {e}; no shape is dispatched by table")
        _active = (settings, table)
        return table


def reload() -> DispatchTable:
    """Read the table file again (after it changed)."""
    global _active
    with _lock:
        _active = (object(), _EMPTY)  # settings no environment equals
    return active()
