"""Which ``topk`` calls the FlyDSL kernel takes; every refusal is a Decline with its reason."""

from __future__ import annotations

from typing import Optional, Union

from ..base import INT32_MAX, Decline, TensorMeta, dtype_name
from .config import MAX_K, MAX_N
from .problem import TopKProblem
from .reference import SUPPORTED_DTYPES


def row_layout(x: TensorMeta, dim: int) -> Union[int, Decline]:
    """The row stride when ``x``'s elements along ``dim`` are unit-stride and every other dim
    collapses into rows of one stride (the kernel's view, no copy); else a Decline."""
    n = x.shape[dim]
    if n > 1 and x.stride[dim] != 1:
        return Decline("layout", f"dim {dim} has stride {x.stride[dim]}: the kernel reads rows of unit stride "
                                 "and a transposing copy would cost more than it saves")
    outer = [(s, st) for i, (s, st) in enumerate(zip(x.shape, x.stride)) if i != dim and s != 1]
    if not outer:
        return n
    for (s0, st0), (s1, st1) in zip(outer, outer[1:]):
        if st0 != st1 * s1:
            return Decline("layout", f"the dims other than {dim} do not collapse into rows of one stride "
                                     f"(strides {x.stride})")
    ld = outer[-1][1]
    if ld <= 0:
        return Decline("layout", f"row stride {ld} is not positive")
    return ld


def check_problem(x: TensorMeta, k: int, dim: int = -1, largest: bool = True,
                  sorted: bool = True, deterministic: Optional[bool] = None) -> Union[TopKProblem, Decline]:
    """The problem for ``torch.topk(x, k, dim, largest, sorted)``, or why not; ``deterministic``
    None reads ``torch.are_deterministic_algorithms_enabled()`` (ties in index order when on)."""
    if x.dtype not in SUPPORTED_DTYPES:
        return Decline("dtype", f"{dtype_name(x.dtype)} input: the kernel takes float32, float16 and bfloat16")
    if len(x.shape) == 0:
        return Decline("shape", "a 0-d tensor has no dim to select along")
    nd = len(x.shape)
    if not -nd <= dim < nd:
        return Decline("shape", f"dim {dim} is out of range for a {nd}-d tensor (PyTorch reports the error)")
    dim %= nd
    n = x.shape[dim]
    if not isinstance(k, int):
        return Decline("shape", f"k={k!r} is symbolic; the kernel needs a concrete k")
    if k < 1 or k > n:
        return Decline("shape", f"k={k} with {n} elements along dim {dim}: nothing to select or out of range "
                                "(PyTorch's kernel answers)")
    if n > MAX_N:
        return Decline("size", f"{n} elements along dim {dim}: the kernel takes rows of at most {MAX_N}")
    if k > MAX_K:
        return Decline("size", f"k={k}: the kernel sorts at most {MAX_K} survivors in LDS")
    ld = row_layout(x, dim)
    if isinstance(ld, Decline):
        return ld
    rows = 1
    for i, s in enumerate(x.shape):
        if i != dim:
            rows *= s
    if rows == 0:
        return Decline("shape", "no rows: nothing to compute")
    if (rows - 1) * ld + n - 1 > INT32_MAX:
        return Decline("size", f"{rows} rows of stride {ld}: element offsets exceed 32 bits")
    if deterministic is None:
        import torch

        deterministic = torch.are_deterministic_algorithms_enabled()
    return TopKProblem(rows, n, k, x.dtype, bool(largest), bool(sorted), ld, bool(deterministic))


def check_out(problem: TopKProblem, values: Optional[TensorMeta], indices: Optional[TensorMeta]) -> Optional[Decline]:
    """``topk.values``: the out tensors must have the result dtypes (PyTorch resizes them)."""
    import torch

    if values is not None and values.dtype != problem.dtype:
        return Decline("dtype", f"values out is {dtype_name(values.dtype)}, the input is {dtype_name(problem.dtype)}")
    if indices is not None and indices.dtype != torch.int64:
        return Decline("dtype", f"indices out is {dtype_name(indices.dtype)}, not int64")
    return None
