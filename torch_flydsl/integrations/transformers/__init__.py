"""transformers 5.x models' RMSNorm layers on the FlyDSL kernel, opt-in, through the
``kernels`` package's kernel-layer mapping (no download: the mapped repository is an object in
this process whose ``load()`` returns ``rms_norm.FlyDSLRMSNorm``).

    import torch_flydsl.integrations.transformers as flydsl_tf
    model = AutoModelForCausalLM.from_pretrained(...).to("cuda")   # or from_config
    flydsl_tf.kernelize(model)

``kernelize`` finds the model's RMSNorm modules (classes transformers decorated for the
``"RMSNorm"`` kernel layer, or named ``*RMSNorm``), registers those whose forward is
``LlamaRMSNorm``'s or ``Olmo2RMSNorm``'s formula with ``kernels`` under that layer name where transformers has not
(transformers 5.24 wires its decorator to ``kernels`` only for kernels 0.18.2-0.19; with any
other ``kernels`` the decorator is a no-op), and runs ``kernels.kernelize`` on each of them with
``mapping()``: their ``forward`` becomes ``FlyDSLRMSNorm``'s, which serves each eligible call
with FlyDSL and runs the module's own forward for every other (``rms_norm``'s docstring lists
the rules). Nothing else in the model is touched. The reasons are logged on the
``torch_flydsl`` logger (``TORCH_FLYDSL_LOG=info``: one line per class; ``debug``: per call);
``report(model)`` returns them.

Tested with transformers 5.24 and kernels 0.17.2 (``scripts/vllm_hook_test.sh``'s venv).
"""

from __future__ import annotations

from typing import Any, Optional

from ..._log import log
from .rms_norm import LAYER_NAME, FlyDSLRMSNorm, class_decline

__all__ = ["FlyDSLRMSNorm", "LAYER_NAME", "REPOSITORY", "kernelize", "mapping", "report"]

_NEEDS_KERNELS = "torch_flydsl.integrations.transformers needs the kernels package (pip install kernels)"


class _InProcessRepository:
    """A ``kernels`` repository (its ``RepositoryProtocol``: ``load()`` returns the layer class)
    that is the plugin itself: nothing is downloaded or read from disk."""

    layer_name = LAYER_NAME

    def load(self):
        return FlyDSLRMSNorm

    def __str__(self) -> str:
        return "torch_flydsl (in-process FlyDSLRMSNorm; no download)"


REPOSITORY = _InProcessRepository()


def devices() -> tuple[str, ...]:
    """The ``kernels`` device types the plugin's layer is mapped for in this process: a ROCm
    build's GPU (``rocm``; ``cuda`` too, its torch device type) and, under the emulator /
    reference-standin executors, the CPU (which stands for the gfx950 there)."""
    import torch

    from ... import config

    out = ["rocm", "cuda"] if torch.version.hip else []
    if config.executor() in ("emulator", "reference-standin"):
        out.append("cpu")
    return tuple(out)


def mapping() -> dict:
    """The ``kernels`` mapping ``{"RMSNorm": {device: REPOSITORY}}`` for this process's
    devices: usable with ``kernels.use_kernel_mapping`` / ``register_kernel_mapping`` directly."""
    return {LAYER_NAME: {d: REPOSITORY for d in devices()}}


def _candidate(module) -> bool:
    cls = type(module)
    return getattr(cls, "kernel_layer_name", None) == LAYER_NAME or cls.__name__.endswith("RMSNorm")


def report(model) -> dict[str, Optional[str]]:
    """Each RMSNorm module of ``model`` by name: None where ``kernelize`` maps it to the FlyDSL
    layer (then each call still decides: ``rms_norm.forward``), else why it keeps its forward."""
    out: dict[str, Optional[str]] = {}
    for name, module in model.named_modules():
        if not _candidate(module):
            continue
        layer = getattr(type(module), "kernel_layer_name", LAYER_NAME)
        out[name] = (f"its kernel layer is {layer!r}, not {LAYER_NAME!r}" if layer != LAYER_NAME
                     else class_decline(type(module)))
    return out


def kernelize(model, mode: Any = None, device: Any = None):
    """Map ``model``'s eligible RMSNorm modules to ``FlyDSLRMSNorm`` through ``kernels`` (see
    the module docstring); returns ``model``. ``mode``: a ``kernels.Mode`` (default INFERENCE,
    TRAINING when ``model.training``; a mode with TORCH_COMPILE keeps the model's forward);
    ``device``: as ``kernels.kernelize`` takes it (default: the module's parameters' device).
    Raises ImportError without ``kernels``."""
    try:
        import kernels  # type: ignore[import-not-found, unused-ignore]
    except ImportError as e:
        raise ImportError(f"{_NEEDS_KERNELS}: {e}") from e
    if mode is None:
        mode = kernels.Mode.TRAINING if model.training else kernels.Mode.INFERENCE
    verdicts = report(model)
    served: dict[str, int] = {}
    kept: dict[str, str] = {}
    table = mapping()
    with kernels.use_kernel_mapping(table, inherit_mapping=False):
        for name, module in model.named_modules():
            if name not in verdicts:
                continue
            cls = type(module)
            if verdicts[name] is not None:
                kept.setdefault(cls.__name__, verdicts[name] or "")
                continue
            if getattr(cls, "kernel_layer_name", None) is None:
                kernels.replace_kernel_forward_from_hub(cls, LAYER_NAME)
            # One module at a time: only RMSNorm modules are kernelized (none has children), so
            # no other layer's forward (a hub kernel the user mapped) is reset.
            kernels.kernelize(module, mode=mode, device=device, use_fallback=True)
            if getattr(module.forward, "__func__", None) is FlyDSLRMSNorm.forward:
                served[cls.__name__] = served.get(cls.__name__, 0) + 1
            else:  # no device mapped here, or a mode the layer does not take (TORCH_COMPILE)
                kept.setdefault(cls.__name__, f"kernels kept the model's forward (mode {mode}, devices mapped: "
                                              f"{', '.join(table[LAYER_NAME]) or 'none here'})")
    for cls_name, count in served.items():
        log.info("transformers %s x%d: mapped to FlyDSLRMSNorm for %s (eligible calls run FlyDSL, the rest "
                 "the model's forward)", cls_name, count, ", ".join(table[LAYER_NAME]))
    for cls_name, why in kept.items():
        log.info("transformers %s: keeps its forward: %s", cls_name, why)
    return model
