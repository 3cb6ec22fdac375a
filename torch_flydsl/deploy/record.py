"""Record the GEMM shapes a model runs, as a ``precompile`` spec (a shapes file).

Two ways:

- ``with torch_flydsl.deploy.record.record_shapes("shapes.json"): model(x)`` records every
  eager call of an op whose family records shapes (``KernelFamily.recorded_shape``: the dense
  family's ``mm``/``addmm``, ``nn.Linear`` included) that the family could serve;
- ``TORCH_FLYDSL_RECORD_SHAPES=FILE`` records, in every process, each GEMM shape that reaches
  the plugin: Inductor nodes it is offered (``torch.compile`` with max-autotune) and calls of the
  vLLM re-routes (unquantized linear layers as ``mm``, MXFP8 linear layers as ``scaled_mm``).
  Each process merges its shapes into ``FILE`` when it ends (``multiprocessing`` workers
  included, which skip ``atexit``: ``deploy.at_exit``), under a file lock, atomically.

Shapes in a dtype or layout the family cannot take are left out (counted in
``Recorder.skipped``).
"""

from __future__ import annotations

import contextlib
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
    def __init__(self):
        self.shapes: dict = {}  # Shape -> calls
        self.skipped = 0
        self._lock = threading.Lock()

    def note(self, shape: Optional[Shape]) -> None:
        with self._lock:
            if shape is None:
                self.skipped += 1
            else:
                self.shapes[shape] = self.shapes.get(shape, 0) + 1

    def save(self, path, breadth: str = "curated") -> Path:
        """Merge into ``path`` (keeping the shapes already there) under an exclusive lock, and
        atomically: a failed write (a full disk) leaves the shapes recorded before."""
        from .files import update
        from .spec import load, shapes_text

        path = Path(path)

        def merged() -> str:
            known = []
            if path.is_file() and path.stat().st_size:
                try:
                    known = [w.shape for w in load(path).work]
                except SpecError:
                    known = []  # not a shapes file: replaced, as the caller asked
            return shapes_text(list(dict.fromkeys(known + sorted(self.shapes, key=lambda s: s.label()))), breadth)

        return update(path, merged)


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
    """Record ``shape`` when ``TORCH_FLYDSL_RECORD_SHAPES`` is set (None: counted as skipped)."""
    path = os.environ.get(ENV)
    if not path:
        return
    global _process
    if _process is None or not at_exit.registered_here(ENV):
        with _process_lock:
            if _process is None or not at_exit.registered_here(ENV):
                # First note in this process; in a forked child the inherited recorder holds the
                # parent's shapes (the parent saves those), so the child starts its own.
                _process = Recorder()
                at_exit.on_exit(ENV, _save_at_exit, path)
    try:
        _process.note(shape)
    except Exception:
        pass  # recording must never disturb the run


def _save_at_exit(path: str) -> None:
    try:
        if _process is not None and _process.shapes:
            _process.save(path)
    except Exception as e:
        from torch_flydsl_boot import warn_once

        warn_once(f"{ENV}-save", f"{ENV}={path}: could not write the recorded shapes ({type(e).__name__}: {e})")
