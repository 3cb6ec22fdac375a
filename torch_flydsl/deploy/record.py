"""Record the GEMM shapes a model runs, as a ``precompile`` spec (a shapes file).

Two ways:

- ``with torch_flydsl.deploy.record.record_shapes("shapes.json"): model(x)`` records every
  eager call of an op whose family records shapes (``KernelFamily.recorded_shape``: the dense
  family's ``mm``/``addmm``, ``nn.Linear`` included) that the family could serve;
- ``TORCH_FLYDSL_RECORD_SHAPES=FILE`` records, in every process, each GEMM shape that reaches
  the plugin: Inductor nodes it is offered (``torch.compile`` with max-autotune) and calls of the
  vLLM re-routes (unquantized linear layers as ``mm``, MXFP8 linear layers as ``scaled_mm``).
  Each process merges its shapes into ``FILE`` soon after it first sees one (within
  ``at_exit.DELAY_S``, on a background thread: a Ray actor or a SIGKILLed worker runs no exit
  hook) and when it ends (``multiprocessing`` workers included, which skip ``atexit``:
  ``deploy.at_exit``), under a file lock, atomically: every process (each rank of a
  tensor-parallel server) adds its shapes to the one file, none lost. A shape already seen costs
  a call what it did before (a dict update under a lock); a new one also asks for a save
  (``at_exit.soon``, about a microsecond; ``benchmarks/record_cost.py``).

Shapes in a dtype or layout the family cannot take are left out (counted in
``Recorder.skipped``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Optional

from ..dispatch_table import _ENV_DATA
from . import at_exit
from .spec import Shape, SpecError

ENV = "TORCH_FLYDSL_RECORD_SHAPES"
def shape_of_call(aten_op: str, inputs: list) -> Optional[Shape]:
    """The ``Shape`` a call of ``aten_op`` with ``inputs`` (tensors or TensorMetas, in the aten
    op's order) poses, as its family records it; None when no family records such calls or the
    family could not take this one (dtype, layout)."""
    from ..registry import family_for

    family = family_for(aten_op)
    found = None if family is None else family.recorded_shape(aten_op, inputs)
    return None if found is None else Shape.of(found[0], **found[1])


def recordable() -> frozenset:
    """The aten ops some family records (``KernelFamily.recorded_shape``)."""
    from ..registry import families
    from ..templates.family import overridden

    return frozenset(op for f in families() if overridden(f, "recorded_shape") for op in f.aten_ops)


class Recorder:
    def __init__(self, path=None):
        self.shapes: dict = {}  # Shape -> calls
        self.skipped = 0
        self.path = path  # where the process recorder saves (None: the caller saves)
        self._lock = threading.Lock()
        self._unsaved = False  # a shape was added since the last save began
        self._parsed: dict = {}  # a file entry's JSON items -> its Shape (see _known)

    def note(self, shape: Optional[Shape]) -> bool:
        """Count one call of ``shape`` (None: skipped); True when it is a shape not seen before."""
        with self._lock:
            if shape is None:
                self.skipped += 1
                return False
            calls = self.shapes.get(shape)
            self.shapes[shape] = 1 if calls is None else calls + 1
            if calls is None:
                self._unsaved = True
                return True
            return False

    def save(self, path, breadth: str = "curated") -> Path:
        """Merge into ``path`` (keeping the shapes already there) under an exclusive lock, and
        atomically: a failed write (a full disk) leaves the shapes recorded before. Nothing is
        written when the file holds every shape already (another rank's save, or this one's)."""
        from .files import update
        from .spec import shapes_text

        path = Path(path)
        with self._lock:  # other threads may be noting shapes meanwhile
            self._unsaved = False
            mine = list(self.shapes)
        try:
            have = set(self._known(path)) if mine else set()
            if mine and all(s in have for s in mine):
                return path

            def merged() -> str:
                known = list(dict.fromkeys(self._known(path)))
                have = set(known)
                new = sorted((s for s in mine if s not in have), key=lambda s: s.label())
                self._parsed.update((tuple(s.to_json().items()), s) for s in new)  # as read back
                return shapes_text(known + new, breadth)

            return update(path, merged)
        except BaseException:
            self._unsaved = True  # the next save (at the latest the one at exit) tries again
            raise

    def _known(self, path: Path) -> list:
        """The shapes ``path`` holds: [] when it is missing, empty or not a shapes file (then it
        is replaced, as the caller asked); an entry this version cannot read is left out. Each
        entry is parsed once per recorder (``_parsed``), so re-reading a file of thousands of
        shapes at every save costs about a JSON parse."""
        from .spec import SHAPES_FORMAT, SHAPES_VERSION

        try:
            doc = json.loads(path.read_bytes()) if path.is_file() and path.stat().st_size else None
        except (OSError, ValueError):
            return []
        if not (isinstance(doc, dict) and doc.get("format") == SHAPES_FORMAT
                and doc.get("version") == SHAPES_VERSION and isinstance(doc.get("shapes"), list)):
            return []
        known = []
        for raw in doc["shapes"]:
            try:
                key = tuple(raw.items())
                shape = self._parsed.get(key)
                if shape is None:
                    shape = self._parsed[key] = Shape.of(raw["op"], **{k: v for k, v in raw.items() if k != "op"})
            except (SpecError, TypeError, ValueError, KeyError, AttributeError):
                continue
            known.append(shape)
        return known

    def unsaved(self) -> bool:
        """Whether a shape was added since the last save began."""
        return self._unsaved


@contextlib.contextmanager
def record_shapes(path=None, breadth: str = "curated"):
    """Record the eager GEMMs run in this block (all threads); write them to ``path`` at exit."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    rec = Recorder()
    aten = torch.ops.aten

    ops = recordable()

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            if name in ops and func is getattr(func.overloadpacket, "default", None):
                rec.note(shape_of_call(name, list(args)))
            return func(*args, **kwargs)

    with _Mode():
        yield rec
    if path is not None:
        rec.save(path, breadth)


_process: Optional[Recorder] = None
_process_lock = threading.Lock()


def _fresh_lock_in_child() -> None:
    global _process_lock
    _process_lock = threading.Lock()  # another thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


_KEY = os.fsencode(ENV)


def recording() -> bool:
    """Whether ``TORCH_FLYDSL_RECORD_SHAPES`` is set (~50 ns: read from os.environ's own map;
    it runs on every call of the vLLM re-route)."""
    return bool(_ENV_DATA.get(_KEY) if _ENV_DATA is not None else os.environ.get(ENV))


def note_from_env(aten_op: str, inputs: list) -> None:
    """Record the shape of one call of ``aten_op`` when ``TORCH_FLYDSL_RECORD_SHAPES`` is set
    (cheap no-op otherwise)."""
    if os.environ.get(ENV):
        try:
            note_shape(shape_of_call(aten_op, inputs))
        except Exception:
            pass  # recording must never disturb the run


def note_shape(shape: Optional[Shape]) -> None:
    """Record ``shape`` when ``TORCH_FLYDSL_RECORD_SHAPES`` is set (None: counted as skipped). A
    shape this process has not seen before is merged into the file within ``at_exit.DELAY_S``."""
    path = os.environ.get(ENV)
    if not path:
        return
    global _process
    if _process is None or not at_exit.registered_here(ENV):
        with _process_lock:
            if _process is None or not at_exit.registered_here(ENV):
                # First note in this process; in a forked child the inherited recorder holds the
                # parent's shapes (the parent saves those), so the child starts its own.
                _process = Recorder(path)
                at_exit.on_exit(ENV, _save_process)
    try:
        if _process.note(shape):
            at_exit.soon(ENV)
    except Exception:
        pass  # recording must never disturb the run


def _save_process() -> None:
    """Save this process's recorder into its file when it has shapes the file may lack (from the
    saver thread and at exit; ``at_exit`` runs one at a time)."""
    rec = _process
    try:
        if rec is not None and rec.path and rec.unsaved():
            rec.save(rec.path)
    except Exception as e:
        from torch_flydsl_boot import warn_once

        warn_once(f"{ENV}-save", f"{ENV}={rec.path if rec else ''}: could not write the recorded shapes "
                                 f"({type(e).__name__}: {e})")
