"""vLLM on ROCm: serve the unquantized linear layers whose shape the dispatch table names with
the plugin's dense FlyDSL kernel; leave every other call exactly as vLLM does it. Armed by
``torch_flydsl.integrations.vllm.install`` (``TORCH_FLYDSL_VLLM=1``).

The seam
--------
On ROCm every unquantized linear layer, eager or compiled, calls the opaque custom op
``torch.ops.vllm.rocm_unquantized_gemm(x, weight, bias)``, defined in
``vllm/model_executor/layers/utils.py`` by ``direct_register_custom_op`` with
``rocm_unquantized_gemm_impl`` as its kernel for the platform's dispatch key (``CUDA`` on
ROCm; ``CPU`` on vLLM's CPU / unspecified platforms, which is what a CPU-only test process
gets) and a fake kernel for tracing. Some fusion passes emit the same op. Inside that impl vLLM
picks batch-invariant, skinny (wvSplitKrc / wvSplitK / LLMM1), AITER Triton, AITER tgemm or
``F.linear`` (hipBLASLt).

Checked here for vLLM 0.33.0 (the wheel). Older releases registered the same kernel under the
op name ``rocm_unquantized_gemm_impl`` (mid-2025 sources); when the rename reached a release
was not verifiable here (vLLM's git history could not be fetched), so this module supports
the ``rocm_unquantized_gemm`` name with the ``(x, weight, bias)`` signature only and warns
when a vLLM lacks it. Anything with that op name and signature works unchanged.

The mechanism
-------------
Once ``vllm.model_executor.layers.utils`` has executed (now, if it already has; otherwise a
post-import hook, ``torch_flydsl._import_hook``), a ``torch.library.Library("vllm", "IMPL")``
registers our wrapper as the op's kernel for the key that vLLM's kernel is registered on
(``current_platform.dispatch_key``, confirmed with the dispatcher), passing
``allow_override=True``. Every torch from 2.11 to 2.15 has that argument on
``Library.impl`` (False by default in 2.11/2.12, True from 2.13); without it 2.11/2.12 refuse,
because vLLM's own registration of that key is recorded in ``torch.library._impls``. The
dispatcher then calls the wrapper; vLLM's source, its module attributes, its fake kernel and
the op's schema are untouched, so compiled graphs (which hold the opaque op) keep working
and tracing is unchanged. Destroying the library (``_uninstall``) restores vLLM's kernel.
Rejected: rebinding ``rocm_unquantized_gemm_impl`` on the module (the dispatcher holds the
function object, so that changes nothing); wrapping ``UnquantizedLinearMethod`` (misses the
fusion passes' calls and patches vLLM's classes).

The wrapper: ``M = x.numel() // x.size(-1)``, ``N, K = weight.shape``. When ``x`` is bf16 or
fp16, ``weight`` (same dtype) is a contiguous ``[N, K]`` (layout ``nt``: ``b = weight.t()``),
``x`` has a row-major ``[M, K]`` view, any bias is a same-dtype ``[N]``, and
``dispatch_table.active().lookup("mm", dtype, "nt", bias is not None, M, N, K)`` names a
config, the dense family's ``dense_mm_out`` / ``dense_addmm_out`` (alpha = beta = 1) runs
through ``ops.try_run`` into a new ``[M, N]`` tensor, returned as ``[*x.shape[:-1], N]``.
Under ``VLLM_BATCH_INVARIANT`` a hit is declined too (a per-M config is not batch invariant).
Any other call, or a ``try_run`` that says why our kernel could not run (not a gfx950, no
toolchain, a compile failure, operands the config does not fit), calls vLLM's original
``rocm_unquantized_gemm_impl`` unchanged, so skinny, AITER and hipBLASLt choices stay
vLLM's. With ``TORCH_FLYDSL_LOG=debug`` one line per distinct (shape, decision) says who
served it. A miss costs about a microsecond of Python (benchmarks/vllm_reroute_cost.py).
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ..._log import log
from .common import _say, arm, batch_invariant, guarded_serve

UTILS_MODULE = "vllm.model_executor.layers.utils"
OP_NAME = "rocm_unquantized_gemm"
QUALNAME = f"vllm::{OP_NAME}"
IMPL_ATTR = "rocm_unquantized_gemm_impl"
ARM_NAME = "reroute"  # its name for common.arm
# Keys tried after the platform's own, in case vllm.platforms cannot say.
_PROBE_KEYS = ("CUDA", "CPU", "XPU", "PrivateUse1")

_lock = threading.Lock()


@dataclass
class Route:
    """One installed re-route: what the dispatcher now calls for ``key``, and what it chains to."""

    key: str
    original: Callable  # vLLM's rocm_unquantized_gemm_impl, called unchanged on every miss
    wrapper: Callable
    library: Any  # the torch.library.Library holding the override (destroying it restores vLLM's)


_routes: dict[str, Route] = {}


def install() -> None:
    """Arm the re-route (idempotent): it is installed when vLLM's layer utils have executed.
    Called by ``integrations.vllm.install`` (``TORCH_FLYDSL_VLLM=1``)."""
    arm(ARM_NAME, UTILS_MODULE, _reroute, f"{QUALNAME} not re-routed, vLLM's own kernel serves every call")


def installed() -> bool:
    """Whether the dispatcher calls our wrapper for ``vllm::rocm_unquantized_gemm`` now."""
    return bool(_routes)


# -- the re-route ---------------------------------------------------------------------------


def _dispatch_key(torch) -> str:
    """The key vLLM registered its kernel on: the platform's ``dispatch_key`` (what
    ``direct_register_custom_op`` used), confirmed by the dispatcher."""
    keys = []
    platforms = sys.modules.get("vllm.platforms")
    try:
        if platforms is not None:
            keys.append(str(platforms.current_platform.dispatch_key))
    except Exception:  # noqa: BLE001 - then probe
        pass
    for key in keys + [k for k in _PROBE_KEYS if k not in keys]:
        if torch._C._dispatch_has_kernel_for_dispatch_key(QUALNAME, key):
            return key
    raise RuntimeError(f"{QUALNAME} has no kernel on any of {', '.join(keys + list(_PROBE_KEYS))}")


def _reroute() -> None:
    import torch

    utils = sys.modules[UTILS_MODULE]
    original = getattr(utils, IMPL_ATTR, None)
    if original is None or not torch._C._dispatch_has_kernel(QUALNAME):
        raise RuntimeError(f"this vLLM has no {QUALNAME} op with {UTILS_MODULE}.{IMPL_ATTR} as its kernel "
                           "(the seam torch_flydsl re-routes)")
    key = _dispatch_key(torch)
    with _lock:
        if key in _routes:
            return
        wrapper = _make_wrapper(original)
        lib = torch.library.Library("vllm", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel": we chain to it
            lib.impl(OP_NAME, wrapper, key, allow_override=True)
        _routes[key] = Route(key, original, wrapper, lib)
    log.info("torch_flydsl: %s on %s re-routed: shapes named by %s run FlyDSL kernels, every other call "
             "runs vLLM's %s", QUALNAME, key, "TORCH_FLYDSL_DISPATCH_TABLE", IMPL_ATTR)


def _uninstall() -> None:
    """Give every re-routed key back to vLLM's kernel (tests: ``integrations.vllm._uninstall``)."""
    with _lock:
        for route in _routes.values():
            route.library._destroy()
        _routes.clear()


def _make_wrapper(original: Callable) -> Callable:
    """The kernel the dispatcher calls: ours for a table hit, ``original`` for everything else."""
    import torch

    from ... import dispatch_table, ops
    from ...deploy.record import note_from_env, recording
    from ...registry import family_for

    family = family_for("mm")
    half = (torch.bfloat16, torch.float16)
    active = dispatch_table.active
    try_run = ops.try_run
    debug = logging.DEBUG

    def serve(x, weight, bias):
        """(output, None) when our kernel ran, else (None, why not)."""
        dtype = x.dtype
        if dtype not in half:
            return None, "dtype is not bf16/fp16"
        if recording():
            operands = [x.reshape(-1, x.shape[-1]), weight.t()]
            note_from_env("mm", operands) if bias is None else note_from_env("addmm", [bias, *operands])
        table = active()
        if not table.entries:
            return None, "no dispatch table (TORCH_FLYDSL_DISPATCH_TABLE)"
        # Ordered for the common miss (a shape the table does not name): the lookup comes as
        # early as it can, the checks a hit still needs after it.
        wshape, xshape = weight.shape, x.shape
        if len(wshape) != 2 or not xshape or xshape[-1] != wshape[1] or wshape[1] == 0:
            return None, "not x[..., K] @ weight[N, K].T"
        n, k = wshape
        m = x.numel() // k
        cfg = table.lookup("mm", dtype, "nt", bias is not None, m, n, k)
        if cfg is None:
            return None, "shape not in the dispatch table"
        if m == 0:
            return None, "empty"
        if batch_invariant():
            return None, "VLLM_BATCH_INVARIANT (vLLM's batch-invariant kernel; a per-M table choice is not)"
        if weight.dtype != dtype or (bias is not None and bias.dtype != dtype):
            return None, "mixed dtypes"
        if not weight.is_contiguous():
            return None, "weight is not a contiguous [N, K]"
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != n):
            return None, "bias is not an [N] vector"
        if x.dim() == 2:
            a = x
        else:
            try:
                a = x.view(m, k)
            except RuntimeError:
                return None, "x has no [M, K] view"
        if a.stride(1) != 1:
            return None, "x is not row-major"
        out = x.new_empty((m, n))
        if bias is None:
            why = try_run(family, "dense_mm_out", (a, weight.t()), {"cfg": cfg, "out": out})
        else:
            why = try_run(family, "dense_addmm_out", (bias, a, weight.t()),
                          {"alpha": 1.0, "beta": 1.0, "cfg": cfg, "out": out})
        if why is not None:
            return None, f"FlyDSL {cfg} cannot run: {why}"
        return (out if x.dim() == 2 else out.view(*x.shape[:-1], n)), cfg

    def rocm_unquantized_gemm_flydsl(x, weight, bias=None):
        out, said = guarded_serve(QUALNAME, serve, x, weight, bias)
        if log.isEnabledFor(debug):
            _note(x, weight, bias, "FlyDSL " + said if out is not None else "vLLM's kernel: " + said)
        return original(x, weight, bias) if out is None else out

    rocm_unquantized_gemm_flydsl.original = original  # type: ignore[attr-defined]
    return rocm_unquantized_gemm_flydsl


def _note(x, weight, bias, decision: str) -> None:
    try:
        k = x.size(-1)
        where = (f"M={x.numel() // k if k else 0} N={weight.shape[0]} K={k} "
                 f"{str(x.dtype).replace('torch.', '')} bias={bias is not None}")
    except Exception:  # noqa: BLE001
        where = f"x{list(x.shape)} weight{list(weight.shape)}"
    _say(logging.DEBUG, (where, decision), "%s %s: %s", QUALNAME, where, decision)
