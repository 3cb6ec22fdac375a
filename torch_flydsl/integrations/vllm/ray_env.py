"""The plugin's settings reach vLLM's Ray actors: the prefixes of the variables the plugin and
FlyDSL read join the list vLLM copies from the driver to them.

vLLM 0.33.0 starts Ray actors in two places, and copies the driver's environment two ways:

- the data-parallel engine actors (``--data-parallel-backend ray``:
  ``vllm.v1.engine.utils.CoreEngineActorManager``) get only what
  ``vllm.ray.ray_env.get_env_vars_to_copy()`` names, as their Ray ``runtime_env``: vLLM's own
  variables, those starting with one of its prefixes (``VLLM_``, ``NCCL_``, ``HF_``, ...) or with
  one of ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY`` (comma-separated), and the names in
  ``VLLM_RAY_EXTRA_ENV_VARS_TO_COPY``. ``TORCH_FLYDSL_*`` match none of vLLM's prefixes;
- the Ray executor's workers (``--distributed-executor-backend ray``:
  ``vllm.v1.executor.ray_executor_v2.RayExecutorV2``) get the driver's whole environment, less
  per-worker names, set (without overwriting the node's own values) when the executor initializes
  each actor: after the actor has imported vLLM and torch, before it loads vLLM's plugins.

``install_ray_env`` (whenever vLLM loads the plugin, in every vLLM process) appends ``PREFIXES``
to ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY`` in ``os.environ``, after what the user set (a
prefix the value already covers is not added again), and says once at info what it added. vLLM
reads the variable at each use (``vllm.envs``' module ``__getattr__``) until
``envs.enable_envs_cache()``, which runs at the end of an engine's or a worker's start-up; the
driver loads plugins when it builds its ``EngineArgs``, before it starts any engine, so the value
it copies with includes the prefixes. Should this vLLM have read the variable for good already,
the plugin warns and names the value to set. The variable is one of vLLM's compile-cache factors:
every process of a server inherits the same value, so their keys agree.

Not added: ``TORCHINDUCTOR_*`` (PyTorch's own settings, e.g. the GEMM backends and the Inductor
cache dir that the plugin's default cache lives under) and node-local ones (``ROCM_PATH``,
``HSA_OVERRIDE_GFX_VERSION``): add them to the variable yourself where the driver's values hold
on every node. A vLLM without the variable gets one info line and no change.
"""

from __future__ import annotations

import os
import sys

from ..._log import log
from .common import arm

ENVS_MODULE = "vllm.envs"
VARIABLE = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"
# The prefixes of every variable the plugin reads (docs/configuration.md) that a worker must see
# as the driver does: the plugin's own, and FlyDSL's (FLYDSL_RUNTIME_CACHE_DIR, FLYDSL_GPU_ARCH).
PREFIXES = ("TORCH_FLYDSL_", "FLYDSL_")
ARM_NAME = "ray-env"  # its name for common.arm


def install_ray_env() -> None:
    """Add ``PREFIXES`` to the variables vLLM copies to its Ray actors (idempotent; once vLLM's
    ``envs`` module has executed). Never raises: a failure is logged."""
    arm(ARM_NAME, ENVS_MODULE, _add_to_vllm, "TORCH_FLYDSL_* not added to what vLLM copies to its Ray actors")


def tokens(value: str) -> list[str]:
    """The prefixes a comma-separated value names, as vLLM splits it (blanks dropped)."""
    return [t.strip() for t in value.split(",") if t.strip()]


def with_prefixes(value: str, prefixes=PREFIXES) -> tuple[str, list[str]]:
    """``value`` with each of ``prefixes`` that it does not cover appended (a prefix is covered
    by any of value's that starts it, since vLLM copies a name that starts with one), and the
    ones appended. The user's text is kept as it was, in front."""
    have = tokens(value)
    missing = [p for p in prefixes if not any(p.startswith(t) for t in have)]
    if not missing:
        return value, []
    head = value.rstrip(", \t\n")
    return (head + "," if head.strip() else "") + ",".join(missing), missing


def _add_to_vllm() -> None:
    envs = sys.modules[ENVS_MODULE]
    table = getattr(envs, "environment_variables", None)
    if not isinstance(table, dict) or VARIABLE not in table:
        log.info("torch_flydsl: this vLLM has no %s; under Ray, set the TORCH_FLYDSL_* variables on every "
                 "node (or in the actors' runtime_env)", VARIABLE)
        return
    value, added = with_prefixes(os.environ.get(VARIABLE, ""))
    if added:
        os.environ[VARIABLE] = value
        log.info("torch_flydsl: added %s to %s (vLLM copies the variables that start with them to its Ray actors): %s=%s",
                 ",".join(added), VARIABLE, VARIABLE, value)
    seen = getattr(envs, VARIABLE, value)  # what vLLM will copy with (its cache, once enabled, holds it)
    unseen = [p for p in PREFIXES if not any(p.startswith(t) for t in tokens(str(seen)))]
    if unseen:
        log.warning("torch_flydsl: vLLM read %s before the plugin loaded (%r): %s will not reach its Ray "
                    "actors; start vLLM with %s=%s", VARIABLE, seen, ",".join(unseen), VARIABLE,
                    with_prefixes(str(seen))[0])
