"""Record the GEMM shapes a model runs, as a ``precompile`` spec (a shapes file).

Two ways:

- ``with torch_flydsl.deploy.record.record_shapes("shapes.json"): model(x)`` records every
  eager ``mm``/``addmm`` (``nn.Linear`` included) the dense family could serve;
- ``TORCH_FLYDSL_RECORD_SHAPES=FILE`` records, in every process, each GEMM shape that reaches
  the plugin: Inductor nodes it is offered (``torch.compile`` with max-autotune) and calls of the
  vLLM re-routes (unquantized linear layers as ``mm``, MXFP8 linear layers as ``scaled_mm``).
  Each process merges its shapes into ``FILE`` at exit, under a file lock, atomically.

Shapes in a dtype or layout the dense family cannot take are left out (counted in
``Recorder.skipped``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from pathlib import Path
from typing import Optional

from ..dispatch_table import _ENV_DATA
from .spec import Shape, SpecError

ENV = "TORCH_FLYDSL_RECORD_SHAPES"
_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16"}


def shape_of(a, b, bias=None) -> Optional[Shape]:
    """The ``Shape`` of ``a @ b (+ bias)`` for tensors or TensorMetas, or None when the dense
    family could not take it (dtype, a layout that is neither row- nor column-major)."""
    from ..templates.base import TensorMeta
    from ..templates.dense_gemm.problem import major_of

    metas = [x if isinstance(x, TensorMeta) else TensorMeta.of(x) for x in (a, b)]
    dtype = _DTYPES.get(str(metas[0].dtype))
    if dtype is None or metas[1].dtype != metas[0].dtype or len(metas[0].shape) != 2 or len(metas[1].shape) != 2:
        return None
    majors = [major_of(m) for m in metas]
    if None in majors:
        return None
    layout = "".join("n" if x == "row" else "t" for x in majors)
    (m, k), n = metas[0].shape, metas[1].shape[1]
    if bias is not None:
        bm = bias if isinstance(bias, TensorMeta) else TensorMeta.of(bias)
        if not (len(bm.shape) == 1 or bm.stride[0] == 0):
            return None  # a full [M, N] addend is not a bias row
    return Shape("mm", dtype, layout, bias is not None, int(m), int(n), int(k))


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

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.mm.default:
                rec.note(shape_of(args[0], args[1]))
            elif func is aten.addmm.default:
                rec.note(shape_of(args[1], args[2], args[0]))
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


def note_from_env(a, b, bias=None) -> None:
    """Record one dense GEMM shape when ``TORCH_FLYDSL_RECORD_SHAPES`` is set (cheap no-op otherwise)."""
    if os.environ.get(ENV):
        try:
            note_shape(shape_of(a, b, bias))
        except Exception:
            pass  # recording must never disturb the run


def scaled_shape(fmt: str, out_dtype, bias: bool, m: int, n: int, k: int) -> Shape:
    """The ``Shape`` of an MX linear layer's GEMM: ``fmt`` an MX format name (``mxfp8``, ...)."""
    return Shape("scaled_mm", fmt, "nt", bias, int(m), int(n), int(k), _DTYPES.get(str(out_dtype), "bfloat16"))


def note_shape(shape: Optional[Shape]) -> None:
    """Record ``shape`` when ``TORCH_FLYDSL_RECORD_SHAPES`` is set (None: counted as skipped)."""
    path = os.environ.get(ENV)
    if not path:
        return
    global _process
    if _process is None:
        with _process_lock:
            if _process is None:
                _process = Recorder()
                atexit.register(_save_at_exit, path)
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
