"""What every vLLM re-route shares: the opt-in knob, arming a step for when a vLLM module has
executed, the guard that keeps a bug of ours from failing vLLM, the once-per-key log lines, and
the MoE routes' sort of routed rows by expert (``moe`` and ``moe_mx``).

The bottom of the ``integrations.vllm`` package: the re-routes and ``cache_key`` import it, it
imports none of them.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Callable, Optional

from torch_flydsl_boot import env_flag

from ..._log import log

KNOB = "TORCH_FLYDSL_VLLM"
# The table ops whose route a layer fixes once, at weight load (``mx``: a layer the table names
# calls the plugin's op in the traced graph, any other keeps vLLM's kernel): the weights the
# table names for them, and whether shapes are being recorded (then every layer routes), change
# vLLM's traced graphs. Every other re-route decides per call inside an opaque op.
LOAD_TIME_ROUTED_OPS = ("scaled_mm",)

_lock = threading.Lock()
_armed: set = set()  # the names arm() has armed in this process
_said: set = set()
install_error: Optional[str] = None  # the last armed step's failure, for tests and the log


def enabled() -> bool:
    """``TORCH_FLYDSL_VLLM`` (default off; a bad value warns once and reads as off)."""
    return env_flag(KNOB, False)


def arm(name: str, module: str, step: Callable[[], None], what: str) -> bool:
    """Run ``step`` (guarded: a failure logs ``what`` and the error) once ``module`` has executed,
    now if it already has. Once per ``name`` per process; False when it was armed before."""
    with _lock:
        if name in _armed:
            return False
        _armed.add(name)
    from ... import _import_hook

    _import_hook.when_imported(module, lambda: _guarded(step, what))
    return True


def armed(name: str) -> bool:
    """Whether ``arm(name, ...)`` ran (and no ``disarm_all`` since)."""
    return name in _armed


def armed_names() -> tuple[str, ...]:
    """The names ``arm`` ran for in this process, sorted."""
    return tuple(sorted(_armed))


def disarm_all() -> None:
    """Forget every ``arm`` (tests: ``integrations.vllm._uninstall``)."""
    with _lock:
        _armed.clear()


def _guarded(step: Callable[[], None], what: str) -> None:
    # Runs inside vLLM's import of its own module: nothing may escape.
    global install_error
    try:
        step()
    except Exception as e:  # noqa: BLE001
        install_error = f"{type(e).__name__}: {e}"
        log.warning("torch_flydsl: %s: %s", what, install_error)


def require_seam(what: str, found: dict) -> None:
    """Raise naming every vLLM name of ``found`` (qualified name -> what this vLLM has, None when
    it lacks it) that is missing: ``what`` (e.g. "MXFP8 re-route") cannot hook this vLLM."""
    missing = [name for name, value in found.items() if value is None]
    if missing:
        raise RuntimeError(f"this vLLM has no {', '.join(missing)} (the seam torch_flydsl's {what} uses)")


def batch_invariant() -> bool:
    """vLLM's ``envs.VLLM_BATCH_INVARIANT`` (False where it cannot be read)."""
    try:
        envs = sys.modules.get("vllm.envs")
        if envs is None:
            import importlib

            envs = importlib.import_module("vllm.envs")
        return bool(getattr(envs, "VLLM_BATCH_INVARIANT", False))
    except Exception:  # noqa: BLE001
        return False


def sort_routed_rows(topk_ids, groups: int) -> tuple:
    """``(order, offs)`` for an MoE call's routed rows (row ``r`` = token ``r // top_k``'s
    ``r % top_k``-th expert, ``topk_ids.reshape(-1)[r]``): ``order`` the rows grouped by expert
    (a stable ``argsort``, int64), ``offs`` each expert's cumulative end (int32 ``[groups]``, as
    the grouped families read it). Device ops only (counts by ``index_add_``): no host sync, so it
    captures in a CUDA graph."""
    import torch

    flat = topk_ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(groups, dtype=torch.int32, device=flat.device)
    counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    return order, torch.cumsum(counts, 0, dtype=torch.int32)


def guarded_serve(what: str, serve: Callable, *args) -> tuple:
    """``serve(*args)`` (``(output, config)`` or ``(None, why not)``), where an exception of ours
    becomes ``(None, why)`` with one warning per kind: a bug of ours must never fail vLLM's call.
    An ``EmulatorError`` that is not a compile failure (the emulator found a kernel wrong) raises."""
    try:
        return serve(*args)
    except Exception as e:
        if type(e).__name__ == "EmulatorError" and not _caused_by_compile(e):
            raise
        said = f"{type(e).__name__}: {e}"
        _say(logging.WARNING, ("error", what, type(e).__name__), "%s: vLLM's kernel runs: %s", what, said)
        return None, said


def serve_or_miss(what: str, serve: Callable, args: tuple, miss: Callable, where: Callable[[], str]):
    """A re-route's call: ``serve(*args)`` through ``guarded_serve``, and ``miss()`` (vLLM's own
    kernel on the same call) when it did not serve; each outcome is logged once per ``where()``
    (the call's shape, built only when debug logging is on) at debug. Returns what served it:
    serve's output, or miss()'s."""
    out, said = guarded_serve(what, serve, *args)
    if log.isEnabledFor(logging.DEBUG):
        at = where()
        _say(logging.DEBUG, (what, at, said), "%s %s: %s", what, at,
             ("FlyDSL " if out is not None else "vLLM's kernel: ") + said)
    return miss() if out is None else out


def _caused_by_compile(e: BaseException) -> bool:
    return type(e.__cause__).__name__ == "CompileError"


def _say(level: int, key, msg: str, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, msg, *args)
