"""Write Inductor's own autotuning results into a dispatch table (``source: inductor``).

With ``TORCH_FLYDSL_RECORD_WINNERS=FILE``, every node that Inductor autotunes in this process
with a FlyDSL choice among its candidates, of an op whose family records shapes
(``KernelFamily.recorded_shape``) and which dispatch tables name (today the dense family's
mm/addmm), and where a FlyDSL config wins, becomes a table entry (the shape, the winning config and its benchmarked time); the entries are merged into
``FILE`` under a file lock, atomically, within ``at_exit.DELAY_S`` of a new one (on a background
thread: a Ray actor or a SIGKILLed worker runs no exit hook) and when the process ends (a later
entry for the same shape replaces an older one).
Run the model under ``torch.compile(mode="max-autotune")`` with FLYDSL among the GEMM backends
on the MI350; the table then serves callers that do not autotune (the vLLM re-route).

Only autotuning that runs is seen: a warm autotune cache benchmarks nothing (use a fresh
``TORCHINDUCTOR_CACHE_DIR``). The seam is Inductor's public ``add_feedback_saver``, called after
each benchmark with the timings of every choice; nothing here can fail a compile. The Inductor
glue hands ``ensure_installed`` its converter from an IR node to a ``TensorMeta``: this module
reads shapes from metas only, never from Inductor's IR (``deploy`` does not import ``inductor``).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import at_exit

if TYPE_CHECKING:
    from ..templates.base import TensorMeta

    MetaOf = Callable[[Any], Optional[TensorMeta]]  # an Inductor input node -> its TensorMeta (None: symbolic)

ENV = "TORCH_FLYDSL_RECORD_WINNERS"
_lock = threading.Lock()
_installed_for: Optional[str] = None
_entries: dict = {}  # (op, dtype, layout, bias, m, n, k, groups) -> Entry
_unsaved = False  # an entry was added or replaced since the last save began


def ensure_installed(meta_of: MetaOf) -> None:
    """Register the feedback saver once per process when ``TORCH_FLYDSL_RECORD_WINNERS`` is set
    (called when FlyDSL choices are offered: select_algorithm is loaded by then). ``meta_of``
    turns each of Inductor's input nodes into a ``TensorMeta`` (``inductor.offer.tensor_meta``)."""
    global _installed_for, _unsaved
    path = os.environ.get(ENV)
    if not path or (_installed_for is not None and at_exit.registered_here(ENV)):
        return
    with _lock:
        if _installed_for is not None and at_exit.registered_here(ENV):
            return
        if _installed_for is None:  # a forked child keeps its parent's saver (and its entries)
            from torch._inductor import select_algorithm

            select_algorithm.add_feedback_saver(functools.partial(_feedback, meta_of))
        else:
            _entries.clear()  # a forked child: the parent saves what it found
            _unsaved = False
        at_exit.on_exit(ENV, _save, path)
        _installed_for = path


def _feedback(meta_of: MetaOf, timings, name, input_nodes, *rest) -> None:
    """Inductor's feedback hook: (timings by choice, op name, input nodes, ...); the rest of
    its arguments differ between torch releases and are not read."""
    try:
        note(timings, name, [meta_of(n) for n in input_nodes])
    except Exception:  # noqa: BLE001 - recording must never disturb a compile
        pass


def note(timings: dict, name: str, metas: list[Optional[TensorMeta]]) -> None:
    """One autotuning result: ``timings`` by choice for op ``name`` over inputs ``metas`` (None
    for an input with a symbolic size). A FlyDSL winner becomes an entry."""
    global _unsaved
    from ..dispatch_table import Entry, table_ops
    from .record import recordable, shape_of_call

    if name not in recordable() or not timings:
        return
    finite = {c: t for c, t in timings.items() if t == t and t != float("inf")}
    if not finite:
        return
    best = min(finite, key=lambda c: finite[c])
    description = getattr(best, "description", "") or ""
    if not description.startswith("FlyDSL "):
        return  # another choice won: the table keeps that shape on the caller's own path
    if any(m is None for m in metas):
        return  # symbolic sizes: a table names static shapes
    shape = shape_of_call(name, metas)
    if shape is None or shape.op not in table_ops():
        return
    get = shape.get
    entry = Entry(shape.op, get("dtype"), get("layout", "nt"), bool(get("bias", False)), shape.m, shape.n, shape.k,
                  description.split()[1], "inductor", round(finite[best] * 1e3, 3), get("groups", 0))
    with _lock:
        _entries[(entry.op, entry.dtype, entry.layout, entry.bias, entry.m, entry.n, entry.k, entry.groups)] = entry
        _unsaved = True
    at_exit.soon(ENV)


def _save(path: str) -> None:
    """Merge the entries into ``path`` when some were found since the last save began (from
    the saver thread and at exit; ``at_exit`` runs one at a time)."""
    global _unsaved
    try:
        with _lock:
            if not _unsaved:
                return
            _unsaved = False
            entries = list(_entries.values())
        from .. import dispatch_table as dt

        try:
            dt.merge_into(path, entries)  # under the file's lock, re-read first
        except BaseException:
            _unsaved = True  # the next save (at the latest the one at exit) tries again
            raise
    except Exception as e:  # noqa: BLE001
        from torch_flydsl_boot import warn_once

        warn_once(f"{ENV}-save", f"{ENV}={path}: could not write Inductor's FlyDSL winners ({type(e).__name__}: {e})")
