"""Exact TopK reference: PyTorch's CUDA radix-select order, with a total order for ties.

PyTorch's CUDA topk (``aten/src/ATen/native/cuda/SortingRadixSelect.cuh``,
``TopKTypeConfig<float>::convert``; Half/BFloat16 the same on 16 bits) ranks values by an
unsigned key: ``bits ^ (sign ? 0xFFFFFFFF : 0x80000000)``, and every NaN maps to the largest
key. So NaN counts as larger than +inf (first for ``largest=True``, last for ``largest=False``),
and ``-0.0`` ranks just below ``+0.0`` (``largest=True`` with one zero slot left takes
``+0.0``). Widening fp16/bf16 to fp32 keeps that order exactly. PyTorch leaves ties
unspecified: which of several elements equal to the k-th key are taken, and their order. This
reference takes the lowest indices and orders equal keys by ascending index; the kernel takes
ties in its own (thread) order and sorts equal keys by ascending index too, so its values match
bit for bit, and its indices match wherever no tie straddles the k-th place.
"""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def order_keys(x: torch.Tensor, largest: bool = True) -> torch.Tensor:
    """int64 keys in [0, 2**32) whose descending order is the selection order."""
    bits = x.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    neg = (bits >> 31) == 1
    key = torch.where(neg, bits ^ 0xFFFFFFFF, bits ^ 0x80000000)
    key = torch.where(torch.isnan(x.float()), torch.full_like(key, 0xFFFFFFFF), key)
    return key if largest else 0xFFFFFFFF - key


def reference(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """``(values, indices)`` as the kernel computes them (sorted or not, the same order: key
    order, ties by ascending index); values are the input's exact elements."""
    xt = x.movedim(dim, -1)
    keys = order_keys(xt, largest)
    n = xt.shape[-1]
    # One int64 sort key: key descending, index ascending (key < 2**32, index < 2**31).
    composite = keys * (1 << 31) + (n - 1 - torch.arange(n, dtype=torch.int64))
    idx = torch.sort(composite, dim=-1, descending=True, stable=True).indices[..., :k]
    # Gathered as bit patterns: torch.gather on bf16 CPU tensors rewrites NaN bits (0x7FC0 comes
    # back as 0xFFFF), and the values must be the input's exact elements.
    as_int = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}.get(xt.dtype)
    if as_int is None:
        values = torch.gather(xt, -1, idx)
    else:
        values = torch.gather(xt.contiguous().view(as_int), -1, idx).view(xt.dtype)
    return values.movedim(-1, dim), idx.movedim(-1, dim)
