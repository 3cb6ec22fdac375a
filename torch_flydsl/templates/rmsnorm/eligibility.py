"""Can the RMSNorm kernel take this call? ``TensorMeta`` in, a problem or a ``Decline`` with a
reason out. Everything declined keeps PyTorch's kernel."""

from __future__ import annotations

from typing import Optional, Union

from ..base import ALIGN_BYTES, INT32_MAX, Decline, TensorMeta, check_span, dtype_name
from .config import max_n
from .problem import DTYPES, RmsNormProblem


def check_problem(x: TensorMeta, normalized_shape, weight: Optional[TensorMeta], eps) -> Union[RmsNormProblem, Decline]:
    if x.dtype not in DTYPES:
        return Decline("dtype", f"input dtype {dtype_name(x.dtype)} is not bfloat16, float16 or float32")
    if len(normalized_shape) != 1:
        return Decline("shape", f"normalized_shape {list(normalized_shape)}: only one normalized (last) dimension")
    if not x.shape or x.shape[-1] != normalized_shape[0]:
        return Decline("shape", f"normalized_shape {list(normalized_shape)} is not the input's last dimension "
                                f"(input {list(x.shape)})")
    n = x.shape[-1]
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    if rows == 0 or n == 0:
        return Decline("shape", f"empty input {list(x.shape)}: nothing to compute")
    if eps is not None and not eps >= 0:  # also NaN
        return Decline("shape", f"eps={eps} is negative or NaN")
    vec = 16 // x.itemsize
    if n > max_n(vec):
        return Decline("size", f"rows of {n} elements do not fit the kernel's registers (at most {max_n(vec)} "
                               f"{dtype_name(x.dtype)} elements; no two-pass variant)")
    if rows > INT32_MAX or rows * n > INT32_MAX:
        return Decline("size", f"{rows} x {n} elements exceed int32 offsets")
    contiguous = TensorMeta.contiguous(x.shape, x.dtype, x.device_type, x.offset)
    if tuple(x.stride) != contiguous.stride and not all(
            st == cs for st, cs, sz in zip(x.stride, contiguous.stride, x.shape) if sz != 1):
        return Decline("layout", f"input strides {x.stride} are not contiguous (padded or permuted rows: PyTorch's "
                                 "kernel copies them first)")
    if (x.offset * x.itemsize) % ALIGN_BYTES:
        return Decline("alignment", f"input starts {x.offset} elements into its storage, not on a {ALIGN_BYTES}-byte "
                                    "boundary (the output is aligned: their vectors would not line up)")
    d = check_span("input", x)
    if d:
        return d
    if weight is not None:
        if weight.dtype != x.dtype:
            return Decline("dtype", f"weight dtype {dtype_name(weight.dtype)} differs from the input's "
                                    f"{dtype_name(x.dtype)}")
        if tuple(weight.shape) != (n,):
            return Decline("shape", f"weight shape {list(weight.shape)} is not [{n}]")
        if n > 1 and weight.stride[0] != 1:
            return Decline("layout", f"weight stride {weight.stride} is not contiguous")
        if weight.device_type != x.device_type:
            return Decline("device", f"weight on {weight.device_type}, input on {x.device_type}")
    return RmsNormProblem(rows, n, x.dtype, weight is not None)


def check_tensors(x, normalized_shape, weight=None, eps=None):
    return check_problem(TensorMeta.of(x), tuple(normalized_shape), TensorMeta.of_optional(weight), eps)
