"""Write Inductor's own autotuning results into a dispatch table (``source: inductor``).

With ``TORCH_FLYDSL_RECORD_WINNERS=FILE``, every node that Inductor autotunes in this process
with a FlyDSL choice among its candidates, of an op whose family records shapes
(``KernelFamily.recorded_shape``) and which dispatch tables name (today the dense family's
mm/addmm), is judged by the rules every table writer shares (``deploy.verdict``): the fastest
FlyDSL config against the fastest other choice Inductor timed (ATen, Triton), no time under the
shape's roofline, a win only by more than the 1% tie band. A win becomes a table entry (the
shape, the winning config and its benchmarked time); a tie, a loss or a bogus time is *decided*
too and removes the file's old entries for that shape (an M range is cut around it), so the file
says what the newest measurement says; a node with no other choice timed (``FLYDSL`` alone
among the backends) decides nothing. Every judgement is logged (``torch_flydsl`` logger, info).
What was found is merged into ``FILE`` under a file lock, atomically, within ``at_exit.DELAY_S``
of a new finding (on a background thread: a Ray actor or a SIGKILLed worker runs no exit hook)
and when the process ends (a later finding for the same shape replaces an older one).
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

from .._log import log
from . import at_exit, verdict

if TYPE_CHECKING:
    from ..templates.base import TensorMeta

    MetaOf = Callable[[Any], Optional[TensorMeta]]  # an Inductor input node -> its TensorMeta (None: symbolic)

ENV = "TORCH_FLYDSL_RECORD_WINNERS"
_lock = threading.Lock()
_installed_for: Optional[str] = None
_entries: dict = {}  # (op, dtype, layout, bias, n, k, groups, m) -> Entry: the shapes FlyDSL won
_decided: set = set()  # (op, dtype, layout, bias, n, k, groups, m): the shapes it did not win
_unsaved = False  # a finding was added or replaced since the last save began


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
            _decided.clear()
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
    """One autotuning result: ``timings`` (ms) by choice for op ``name`` over inputs ``metas``
    (None for an input with a symbolic size), judged as the module docstring says."""
    global _unsaved
    from ..dispatch_table import Entry, table_ops
    from .record import recordable, shape_of_call

    if name not in recordable() or not timings:
        return
    finite = {c: t for c, t in timings.items() if t == t and t != float("inf")}  # a failed choice times inf
    ours = {c: t for c, t in finite.items() if _config_of(c)}
    if not ours:
        return  # no FlyDSL choice was timed: nothing to say about FlyDSL here
    if any(m is None for m in metas):
        return  # symbolic sizes: a table names static shapes
    shape = shape_of_call(name, metas)
    if shape is None or shape.op not in table_ops():
        return
    get = shape.get
    op, dtype, layout, bias, groups = shape.op, get("dtype"), get("layout", "nt"), bool(get("bias", False)), get("groups", 0)
    where = f"{op} {dtype} {layout}{' bias' if bias else ''} M={shape.m} N={shape.n} K={shape.k}"
    best = min(ours, key=lambda c: ours[c])
    others = {c: t for c, t in finite.items() if c not in ours}
    if not others:
        log.info("%s: %s: no entry, nothing decided: no other choice was timed beside FlyDSL's", ENV, where)
        return
    rival = min(others, key=lambda c: others[c])
    config = _config_of(best) or ""  # not empty: ours holds only choices with a config
    work = verdict.dense_work(shape.m, shape.n, shape.k, dtype) if not groups and dtype in verdict.OPERANDS else None
    # warm: Inductor times back-to-back calls, so the lower (Infinity Cache) bound is the safe one.
    mine, theirs = verdict.Timed(f"FlyDSL {config}", ours[best]), verdict.Timed(_label(rival), others[rival])
    v = verdict.judge(mine, theirs, work=work, warm=True)
    key = (op, dtype, layout, bias, shape.n, shape.k, groups, shape.m)  # verdict.pruned's (weight, M), by bias
    with _lock:
        if v.win:
            _entries[key] = Entry(op, dtype, layout, bias, shape.m, shape.n, shape.k, config, "inductor",
                                  round(ours[best] * 1e3, 3), groups)
            _decided.discard(key)
        else:
            _entries.pop(key, None)
            _decided.add(key)
        _unsaved = True
    log.info("%s: %s: %s: %s", ENV, where, "entry" if v.win else "no entry", v.reason)
    at_exit.soon(ENV)


def _config_of(choice) -> Optional[str]:
    """The FlyDSL config key of one of Inductor's choices (its description: "FlyDSL KEY"), or None."""
    description = getattr(choice, "description", "") or ""
    return description.split()[1] if description.startswith("FlyDSL ") and len(description.split()) > 1 else None


def _label(choice) -> str:
    """What a non-FlyDSL choice is called in a judgement: ATen's extern kernels by their op."""
    name = getattr(choice, "name", None) or type(choice).__name__
    inner = getattr(getattr(choice, "choice", None), "name", None)
    return f"ATen {inner}" if type(choice).__name__ == "ExternKernelCaller" and inner else str(name)


def _save(path: str) -> None:
    """Merge the entries into ``path`` when some were found since the last save began (from
    the saver thread and at exit; ``at_exit`` runs one at a time)."""
    global _unsaved
    try:
        with _lock:
            if not _unsaved:
                return
            _unsaved = False
            entries, decided = list(_entries.values()), set(_decided)
        if not entries and not os.path.exists(path):
            return  # only shapes FlyDSL did not win, and no old entries to drop
        from .. import dispatch_table as dt

        try:
            dt.merge_into(path, entries, prune=lambda old: verdict.pruned(old, decided, by_bias=True))
        except BaseException:
            _unsaved = True  # the next save (at the latest the one at exit) tries again
            raise
    except Exception as e:  # noqa: BLE001
        from torch_flydsl_boot import warn_once

        warn_once(f"{ENV}-save", f"{ENV}={path}: could not write Inductor's FlyDSL winners ({type(e).__name__}: {e})")
