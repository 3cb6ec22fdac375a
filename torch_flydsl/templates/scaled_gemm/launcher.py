"""Host side of the MX scaled GEMM kernel: argument packing and launch.

Launch convention (what ``kernel.build(spec)`` emits):

* grid  = ``(ceil(M / block_m) * ceil(N / block_n), 1, 1)``, block = ``(threads, 1, 1)``;
  static LDS only;
* arguments, in order: ``out, a, b, scale_a, scale_b, bias`` as 1-D unit-stride tensors from
  each operand's first element to its last (``a``/``b`` reinterpreted as int16, the scales as
  int32: the byte storage is what the kernel reads), then ``M, N, K`` (K in values),
  ``lda, ldb`` (row strides of A and of B stored [N, K], in 2-byte units), ``ldsa, ldsb``
  (scale row strides in dwords), ``ldc`` (elements), ``stream``. Without a bias, ``bias`` is any
  1-D tensor of the output dtype (not read).

One compiled kernel per ``KernelSpec`` (config, formats, output dtype, bias on/off) serves every
shape: sizes, strides and pointers are runtime values.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...runtime import kernel_cache
from ..base import Decline, TensorMeta
from ..operands import flat_operand, reinterpret_span
from .config import ScaledGemmConfig
from .eligibility import check_problem
from .problem import ScaledGemmProblem


def checked_problem(a, b, scale_a, scale_b, out, bias=None) -> ScaledGemmProblem:
    """The family's eligibility gate for direct callers; raises ``ValueError`` with its reason."""
    of = TensorMeta.of
    problem = check_problem(of(a), of(b), of(scale_a), of(scale_b), of(out), TensorMeta.of_optional(bias))
    if isinstance(problem, Decline):
        raise ValueError(f"scaled GEMM declines these operands: {problem}")
    return problem


def grid_block(cfg: ScaledGemmConfig, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) the launcher uses for an ``m x n`` output."""
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    return (tiles, 1, 1), (cfg.threads, 1, 1)


def compile_args(
    cfg: ScaledGemmConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stream: Any = None,
    problem: Optional[ScaledGemmProblem] = None,
) -> tuple[Any, tuple]:
    """``(jit_fn, args)`` such that ``flyc.compile(jit_fn, *args)`` compiles (never launches)
    and ``compiled(*args)`` runs ``out = (a * 2^scale_a) @ (b * 2^scale_b) [+ bias]``. Tensors
    may be CPU or meta stand-ins when only compiling.

    ``a`` is ``[M, K]`` (``[M, K/2]`` for float4_e2m1fn_x2) row-major, ``b`` is ``[K, N]``
    (``[K/2, N]``) column-major, ``scale_a``/``scale_b`` are ``[>= M, K/32]`` / ``[>= N, K/32]``
    float8_e8m0fnu row-major, ``out`` is ``[M, N]`` row-major, ``bias`` ``[N]`` (or ``[M, N]``
    expanded with strides ``(0, 1)``) of the output dtype. ``stream``: None (default stream
    placeholder), a raw ``hipStream_t`` int or a torch stream. ``problem``: what the family's
    gate returned for exactly these operands (the caller has checked them: one validation per
    call); without it the gate runs here.
    """
    import flydsl.expr as fx

    from .kernel import UNIT_BYTES, KernelSpec, build

    if problem is None:
        problem = checked_problem(a, b, scale_a, scale_b, out, bias)
    spec = KernelSpec(cfg, problem.a_fmt, problem.b_fmt, problem.out_dtype, bias is not None)
    if bias is not None:
        bias_arg = flat_operand(bias[0] if bias.dim() == 2 else bias)
    else:
        bias_arg = flat_operand(out)[:1]  # never read; keeps the signature fixed
    byte_stride = lambda t, dim: t.stride(dim) * t.element_size()  # noqa: E731
    args = (
        flat_operand(out),
        reinterpret_span(a, torch.int16),
        reinterpret_span(b, torch.int16),
        reinterpret_span(scale_a, torch.int32),
        reinterpret_span(scale_b, torch.int32),
        bias_arg,
        int(problem.m),
        int(problem.n),
        int(problem.k),
        byte_stride(a, 0) // UNIT_BYTES,
        byte_stride(b, 1) // UNIT_BYTES,
        byte_stride(scale_a, 0) // 4,
        byte_stride(scale_b, 0) // 4,
        int(out.stride(0)),
        stream if stream is not None else fx.Stream(None),
    )
    return build(spec), args


def launch(
    cfg: ScaledGemmConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stream: Any = None,
    problem: Optional[ScaledGemmProblem] = None,
) -> torch.Tensor:
    """Run the scaled GEMM into ``out`` on the current HIP stream (real GPU only).

    The caller has checked eligibility (``config_fits`` and the family gate, whose ``problem``
    it passes on); this only packs arguments. Never call it without HIP: FlyDSL aborts the
    process on launch without it.
    """
    if not a.is_cuda:
        raise RuntimeError("scaled_gemm.launch needs device tensors on a ROCm GPU")
    from ...runtime.probe import flydsl_has_cpu_safe_compile

    if not flydsl_has_cpu_safe_compile():
        # The scaled kernel is built and checked with flydsl 0.4+ only (compile without launch).
        raise RuntimeError("scaled_gemm.launch needs flydsl 0.4 or newer")
    if stream is None:
        stream = torch.cuda.current_stream(a.device)
    jit_fn, args = compile_args(cfg, a, b, scale_a, scale_b, out, bias, stream, problem=problem)
    kernel_cache.dispatch(jit_fn, args, a.device)
    return out
