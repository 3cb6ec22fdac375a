"""The plugin's entry in vLLM's compile-cache key.

vLLM 0.33 names its compile cache ``VLLM_CACHE_ROOT/torch_compile_cache/<hash>`` (and
``.../torch_aot_compile/<hash>`` for AOT artifacts) from four factors: ``envs.compile_factors()``,
``VllmConfig.compute_hash()``, the traced source files and the compiler's hash (Inductor's
portable config and the torch key). ``compile_factors()`` evaluates every getter in the
public ``vllm.envs.environment_variables`` dict (minus a fixed ignore list) and is used by both
the regular and the AOT path; it is the one factor a plugin can extend without patching vLLM.
``install_fingerprint`` adds one entry, ``TORCH_FLYDSL_FINGERPRINT``, whose getter returns
``fingerprint()``: plugin version, flydsl version and kernel versions, the parsed
``config.cache_key_knobs()``, what of the dispatch table shapes traced graphs (the weights it
names for the ops a layer routes at weight load, MXFP8 linear today), whether shapes are being
recorded (then every such layer routes) and ``TORCH_FLYDSL_VLLM``. A change to any of them gives
a new cache directory; vLLM records the value in that directory's ``cache_key_factors.json``.
The table's configs and M ranges are not in it: every re-route reads them per call inside an
opaque op, so editing them reuses vLLM's compiled graphs. (The knobs matter for graphs that
Inductor lowered with FLYDSL among its GEMM backends, which call ``torch.ops.torch_flydsl.*``;
``TORCH_FLYDSL_RUN_ONLY`` is among them because it limits the configs such a graph can embed.)
The entry is added whenever vLLM loads the plugin (``vllm_register``), with or without the
re-route: Inductor-lowered FLYDSL graphs need it either way.
A vLLM whose ``envs`` has no ``compile_factors`` gets a warning naming the directory to clear.
"""

from __future__ import annotations

import hashlib
import os
import sys

from .common import KNOB, LOAD_TIME_ROUTED_OPS, arm, enabled

ENVS_MODULE = "vllm.envs"
FINGERPRINT_KEY = "TORCH_FLYDSL_FINGERPRINT"
ARM_NAME = "fingerprint"  # its name for common.arm


def install_fingerprint() -> None:
    """Add the plugin's fingerprint to vLLM's compile-cache key (idempotent). Done whenever vLLM
    loads the plugin, re-route or not: a graph Inductor lowered with FLYDSL among its GEMM
    backends calls ``torch.ops.torch_flydsl.*`` and must not be reused across plugin changes."""
    arm(ARM_NAME, ENVS_MODULE, _register_fingerprint, "compile-cache fingerprint not added")


def _routing_digest() -> str:
    """What of the dispatch table shapes vLLM's traced graphs: the weights it names for the ops
    routed at weight load (``LOAD_TIME_ROUTED_OPS``), as a short SHA-256 ("none" when it names
    none, or no table is in use). Configs and M ranges are read per call: editing them, or
    adding entries for weights already named, keeps the key (and vLLM's compiled graphs)."""
    from ...dispatch_table import active

    weights = sorted(tuple(map(str, w)) for w in active().named_weights() if w[0] in LOAD_TIME_ROUTED_OPS)
    if not weights:
        return "none"
    return "sha256:" + hashlib.sha256(repr(weights).encode()).hexdigest()[:16]


def fingerprint() -> str:
    """What enters vLLM's compile-cache key (whenever vLLM loads the plugin): everything of the
    plugin that changes what compiled or re-routed code runs. Stable across processes."""
    try:
        from ... import config
        from ...deploy.record import ENV as RECORD_ENV, recording
        from ...fingerprint import fingerprint as versions

        parts = ["/".join(versions())]
        parts += [f"{name}={value}" for name, value in config.cache_key_knobs()]
        parts.append(f"routed-at-load={_routing_digest()}")
        parts.append(f"{RECORD_ENV}={int(recording())}")
        parts.append(f"{KNOB}={int(enabled())}")
        parts.append(f"TORCH_FLYDSL_VLLM_MXFP4={int(config.vllm_mxfp4())}")  # routes MXFP4 layers at load
        return ";".join(parts)
    except Exception as e:  # noqa: BLE001 - vLLM would drop a factor whose getter raises
        return f"torch_flydsl fingerprint unavailable: {type(e).__name__}: {e}"


def _register_fingerprint() -> None:
    envs = sys.modules[ENVS_MODULE]
    table = getattr(envs, "environment_variables", None)
    if not isinstance(table, dict) or not callable(getattr(envs, "compile_factors", None)):
        cache_root = os.path.expanduser(os.environ.get("VLLM_CACHE_ROOT", "~/.cache/vllm"))
        root = os.path.join(cache_root, "torch_compile_cache")
        raise RuntimeError(f"this vLLM's compile-cache key has no envs.compile_factors() to carry torch_flydsl's "
                           f"fingerprint: after changing torch_flydsl, flydsl, a TORCH_FLYDSL_* variable or the "
                           f"dispatch table, clear {root}")
    table.setdefault(FINGERPRINT_KEY, fingerprint)


def _uninstall() -> None:
    """Take the entry out of vLLM's key again (tests: ``integrations.vllm._uninstall``)."""
    envs = sys.modules.get(ENVS_MODULE)
    table = getattr(envs, "environment_variables", None)
    if isinstance(table, dict):
        table.pop(FINGERPRINT_KEY, None)
