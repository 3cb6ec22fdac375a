"""Kernel operands as the launchers pass them: 1-D unit-stride spans of the caller's tensors
(same storage), reinterpreted spans, and placeholders for parameters a variant never reads.

Torch only (no FlyDSL): this is the per-call host path.
"""

from __future__ import annotations

import torch


def flat_operand(t: torch.Tensor) -> torch.Tensor:
    """A 1-D unit-stride view from ``t``'s first element to its last one (same storage)."""
    if t.numel() == 0:
        raise ValueError("empty operand")
    shape, stride = t.shape, t.stride()
    if len(shape) == 2:  # the per-call hot path: no generator
        span = (shape[0] - 1) * stride[0] + (shape[1] - 1) * stride[1] + 1
    else:
        span = sum((s - 1) * st for s, st in zip(shape, stride)) + 1
    return t.as_strided((span,), (1,))


def reinterpret_span(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The 1-D byte span of ``t`` reinterpreted as ``dtype`` (same storage)."""
    return flat_operand(t).view(torch.uint8).view(dtype)


_UNREAD: dict = {}  # (device, dtype) -> a one-element tensor for a parameter a kernel never reads


def unread_tensor(device, dtype: torch.dtype) -> torch.Tensor:
    """A one-element ``dtype`` tensor on ``device`` for a kernel parameter that this variant
    never reads (keeps the signature fixed); made once per device and dtype."""
    key = (device, dtype)
    t = _UNREAD.get(key)
    if t is None:
        t = _UNREAD.setdefault(key, torch.zeros(1, dtype=dtype, device=device))
    return t
