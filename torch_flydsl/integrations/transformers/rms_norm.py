"""The FlyDSL RMSNorm layer for transformers' ``"RMSNorm"`` kernel-layer name, and its per-call
choice between the FlyDSL kernel and the model's own forward.

transformers 5.x decorates its hand-written RMSNorm classes with
``@use_kernel_forward_from_hub("RMSNorm")``; the ``kernels`` package replaces a decorated
module's ``forward`` with a mapped layer's (a stateless ``nn.Module`` class holding only
``forward``). ``FlyDSLRMSNorm`` is such a layer. Its forward serves a call with FlyDSL only when
all of these hold, and otherwise runs the module's own class ``forward`` unchanged:

- not inside ``torch_flydsl.disabled()`` and not being traced by ``torch.compile`` (Inductor
  lowers ``rms_norm`` itself);
- the module's class computes ``F.rms_norm(x, (n,), weight, eps)``'s formula: its ``forward``
  is the same code as ``LlamaRMSNorm``'s (fp32 mean of squares, ``rsqrt(var +
  variance_epsilon)``, cast back, times ``weight``: two roundings where the kernel rounds once)
  or ``Olmo2RMSNorm``'s (times ``weight`` in fp32, then cast back: the kernel's one rounding);
  142 of transformers 5.24's 144 ``"RMSNorm"`` classes qualify (NemotronH's fp32-weight
  variant and any other code keep their forward);
- ``weight`` has the input's dtype and shape ``[n]`` (a mixed-precision layer's fp32 weight
  times a bf16 input keeps the model's forward, which promotes), the tensors are not on the
  meta device, the eager overrides are registered in this process;
- the plugin's eager ``_fused_rms_norm`` override would take the call (gfx950, or the CPU under
  the emulator executors; dtype, layout and size eligible): ``torch_flydsl.eager`` decides.

Without autograd recording (``torch.no_grad``, ``inference_mode``, or no tensor requiring grad)
the kernel's output is taken directly (``eager.serve``); with it, ``F.rms_norm`` runs, whose
``_fused_rms_norm`` the override serves and whose backward is PyTorch's formula.
With ``TORCH_FLYDSL_LOG=debug`` each call logs who served it.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
from torch import nn

from ... import eager
from ..._log import log

LAYER_NAME = "RMSNorm"  # transformers' kernel-layer name
_TARGET = "_fused_rms_norm"
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_CLASS_VERDICTS: dict = {}  # class -> why it is not served (None: its formula is ours)


def _code_key(fn) -> Optional[tuple]:
    code = getattr(fn, "__code__", None)
    return None if code is None else (code.co_code, code.co_consts, code.co_names, code.co_varnames)


def _formulas() -> dict:
    """The forwards whose math is ``F.rms_norm``'s, by code: ``LlamaRMSNorm``'s (cast back,
    then times weight) and ``Olmo2RMSNorm``'s (times weight in fp32, then cast back)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    return {_code_key(c.forward): c.__name__ for c in (LlamaRMSNorm, Olmo2RMSNorm)}


def class_decline(cls: Any) -> Optional[str]:
    """Why modules of ``cls`` keep their forward whatever the call (None: its forward is the
    same code as ``LlamaRMSNorm``'s or ``Olmo2RMSNorm``'s, the formula ``F.rms_norm``
    computes). Cached per class."""
    if cls in _CLASS_VERDICTS:
        return _CLASS_VERDICTS[cls]
    try:
        formulas = _formulas()
    except Exception as e:  # transformers absent or broken: nothing to compare with
        why: Optional[str] = f"transformers' LlamaRMSNorm is not importable ({type(e).__name__}: {e})"
    else:
        why = None if _code_key(cls.forward) in formulas else (
            f"{cls.__name__}.forward is neither LlamaRMSNorm's nor Olmo2RMSNorm's formula (x.float() * "
            "rsqrt(mean(x^2) + eps) with weight, cast back): its own forward runs")
    _CLASS_VERDICTS[cls] = why
    return why


def call_decline(module: nn.Module, x: Any) -> Optional[str]:
    """Why this call keeps the module's forward, before asking the eager override (None: ask)."""
    if eager.is_disabled():
        return "torch_flydsl.disabled()"
    why = class_decline(type(module))
    if why:
        return why
    w = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", None)
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or not isinstance(eps, float):
        return "the module has no tensor weight and float variance_epsilon, or the input is not a tensor"
    if x.dim() == 0 or tuple(w.shape) != (x.shape[-1],):
        return f"weight shape {list(w.shape)} is not the input's last dimension (input {list(x.shape)})"
    if w.dtype != x.dtype:
        return (f"weight dtype {w.dtype} differs from the input's {x.dtype}: the model's forward promotes, "
                "F.rms_norm would not")
    if x.dtype not in _DTYPES:
        return f"input dtype {x.dtype} is not bfloat16, float16 or float32"
    if x.device.type == "meta" or w.device.type == "meta":
        return "meta tensors"
    if not eager.eager_enabled():
        return "the eager overrides are not registered in this process (TORCH_FLYDSL_EAGER=0, plugin off, or no device key)"
    return None


def forward(module: nn.Module, hidden_states: Any) -> Any:
    """``FlyDSLRMSNorm.forward``'s body: the FlyDSL kernel's output for an eligible call, the
    module's own class forward for every other."""
    if torch.compiler.is_compiling():
        return type(module).forward(module, hidden_states)
    why = call_decline(module, hidden_states)
    if why is None:
        w: Any = module.weight
        eps: Any = module.variance_epsilon
        n = hidden_states.shape[-1]
        if torch.is_grad_enabled() and (hidden_states.requires_grad or w.requires_grad):
            why = eager.decline(_TARGET, (hidden_states, [n], w, eps))
            if why is None:
                return torch.nn.functional.rms_norm(hidden_states, (n,), w, eps)
        else:
            out = eager.serve(_TARGET, (hidden_states, [n], w, eps))
            if out is not None:
                return out[0]
            why = "the eager override declined (its reason is the aten._fused_rms_norm line above)"
    if log.isEnabledFor(logging.DEBUG):
        log.debug("transformers %s: the model's forward: %s", type(module).__name__, why)
    return type(module).forward(module, hidden_states)


class FlyDSLRMSNorm(nn.Module):
    """The kernel layer ``kernels`` maps ``"RMSNorm"`` to: stateless, ``forward`` only (the
    ``kernels`` contract); every decision is in this module's ``forward`` function."""

    has_backward = True  # autograd through F.rms_norm (PyTorch's backward), or the model's forward
    can_torch_compile = False  # compiled graphs keep the model's forward (Inductor lowers it)

    def forward(self, hidden_states):
        return forward(self, hidden_states)
