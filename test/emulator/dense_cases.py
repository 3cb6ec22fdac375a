"""Dense GEMM problems for the emulator tests: operands with real-world strides, the float64
reference, and the accuracy contract.

Accuracy contract: the kernel's max error against the float64 reference may be at most
``ATEN_FACTOR`` (2) times the error PyTorch's own op (``torch.addmm``/``mm`` on the CPU, in the
inputs' dtype) makes on the same inputs against the same reference, plus ``ERROR_FLOOR``
relative to ``max|ref|``. ATen on the CPU accumulates in fp32 and rounds once to bf16/fp16, as
the kernel does, so the two errors are normally about equal (both ~half an output ulp). The
floor is for problems where ATen's error is zero or nearly so (e.g. every output exactly
representable): 2**-16 is 256 fp32 ulps of the largest output, room for a differently ordered
fp32 sum, yet far below one extra bf16 (2**-9) or fp16 (2**-12) rounding, so it cannot hide a
wrong, doubly rounded or low-precision result.
"""

from __future__ import annotations

from typing import Optional

import torch

from torch_flydsl.emulator import BaselineTolerance, run_and_compare
from torch_flydsl.templates.base import TensorMeta
from torch_flydsl.templates.dense_gemm import GemmProblem, check_problem, compile_args, config_fits, reference

ATEN_FACTOR = 2.0
ERROR_FLOOR = 2.0**-16
MAJOR = {"n": "row", "t": "col"}


def stored(rows, cols, major, dtype, pad=0, offset=0, tight=False):
    """A [rows, cols] matrix stored row- or column-major with a storage offset and a leading
    stride of its contiguous extent rounded up to 16 bytes (as the eligibility gate requires)
    plus ``pad`` elements; returns (view, backing storage). With ``tight`` the storage ends at
    the matrix's last element (no padding after its last row/column), so a read past the
    operand leaves every tensor the kernel was given."""
    contig = cols if major == "row" else rows
    lead = -(-contig // 8) * 8 + pad
    other = rows if major == "row" else cols
    size = offset + lead * (other - 1) + contig if tight else offset + lead * other
    base = torch.empty(size, dtype=dtype)
    stride = (lead, 1) if major == "row" else (1, lead)
    return base.as_strided((rows, cols), stride, offset), base


def aten(a, b, bias, alpha, beta) -> torch.Tensor:
    """PyTorch's own result in the inputs' dtype, on the CPU (the accuracy baseline)."""
    if bias is None:
        return torch.addmm(a.new_zeros(()), a, b, beta=0.0, alpha=alpha)
    return torch.addmm(bias, a, b, beta=beta, alpha=alpha)


def on_storage(value: torch.Tensor, out: torch.Tensor, storage: torch.Tensor) -> torch.Tensor:
    """``value`` placed where ``out`` lies in ``storage`` (float64, nan elsewhere)."""
    full = torch.full(storage.shape, float("nan"), dtype=torch.float64)
    full.as_strided(out.shape, out.stride(), out.storage_offset())[:] = value.to(torch.float64)
    return full


def emulate_gemm(cfg, m, n, k, layout="nn", dtype=torch.bfloat16, pad=0, offset=0, bias: Optional[str] = None,
                 alpha=1.0, beta=1.0, seed=0, tight=False):
    """Run ``out = alpha * A @ B + beta * bias`` through the emulated kernel on fresh random
    inputs and check it (harness: no findings, every output written, nothing else touched,
    the accuracy contract). ``bias``: None, "vector" ([N]), "expanded" ([M, N] with strides
    (0, 1)) or "nan" (a NaN vector, for beta == 0)."""
    a, a_base = stored(m, k, MAJOR[layout[0]], dtype, pad, offset, tight)
    b, b_base = stored(k, n, MAJOR[layout[1]], dtype, pad, offset, tight)
    out, out_base = stored(m, n, "row", dtype, pad, offset, tight)
    inputs = [a_base, b_base]
    bias_t = None
    if bias == "vector":
        bias_t = torch.empty(n, dtype=dtype)
    elif bias == "expanded":
        bias_t = torch.empty(n, dtype=dtype).expand(m, n)
    elif bias == "nan":
        bias_t = torch.full((n,), float("nan"), dtype=dtype)
    elif bias is not None:
        raise ValueError(f"bias {bias!r}")
    if bias in ("vector", "expanded"):
        inputs.append(bias_t if bias_t.dim() == 1 else bias_t[0])
    # Only problems the family takes: anything else is declined before a kernel runs.
    meta = [TensorMeta.of(t) for t in (a, b, out)] + [TensorMeta.of(bias_t) if bias_t is not None else None]
    problem = check_problem(*meta)
    assert isinstance(problem, GemmProblem), problem
    assert config_fits(cfg, problem) is None, config_fits(cfg, problem)
    used_bias = None if beta == 0.0 else bias_t  # addmm ignores the bias when beta == 0
    jit_fn, args = compile_args(cfg, a, b, out, bias_t, alpha, beta)
    tolerance = BaselineTolerance(
        lambda: on_storage(aten(a, b, used_bias, alpha, beta), out, out_base), ATEN_FACTOR, ERROR_FLOOR
    )
    return run_and_compare(
        jit_fn, args, lambda: on_storage(reference(a, b, used_bias, alpha, beta), out, out_base),
        inputs=inputs, outputs=[out_base], tolerance=tolerance, seed=seed,
    )
