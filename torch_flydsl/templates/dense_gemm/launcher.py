"""Host side of the dense GEMM kernel: argument packing, compile cache, launch.

Launch convention (what ``kernel.build(spec)`` emits):

* grid  = ``(ceil(M / block_m) * ceil(N / block_n), 1, 1)``; block index ``x`` is mapped to
  an output tile inside the kernel (row-major over N tiles, or group-M swizzled);
* block = ``(m_waves * n_waves * 64, 1, 1)``; static LDS only (no dynamic shared memory);
* arguments, in order: ``out, a, b, bias`` as 1-D unit-stride tensors that start at each
  operand's first element and cover its span (``flat_operand``), then
  ``M, N, K, lda, ldb, ldc`` (int32, elements), ``alpha, beta`` (fp32), ``stream``.
  ``lda`` is A's leading stride for its major (row: stride(0), col: stride(1)), same for B;
  ``ldc`` is out's row stride. Without a bias, ``bias`` is any 1-D tensor of the dtype (not read).

One compiled kernel per ``KernelSpec`` (config, dtype, majors, bias on/off) serves every shape:
all sizes, strides and pointers are runtime values.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

import torch

from ..base import TensorMeta
from .config import DenseGemmConfig
from .problem import leading_stride, major_of


def flat_operand(t: torch.Tensor) -> torch.Tensor:
    """A 1-D unit-stride view from ``t``'s first element to its last one (same storage)."""
    if t.numel() == 0:
        raise ValueError("empty operand")
    span = sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    return t.as_strided((span,), (1,))


def operand_major(t: torch.Tensor, name: str) -> tuple[str, int]:
    """(major, leading stride) of a 2-D operand, as the eligibility gate reads it."""
    meta = TensorMeta.of(t)
    major = major_of(meta)
    if major is None:
        raise ValueError(f"{name} has no unit-stride dimension: strides {tuple(t.stride())}")
    return major, leading_stride(meta, major)


def kernel_spec(cfg: DenseGemmConfig, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]):
    from .kernel import KernelSpec

    a_major, _ = operand_major(a, "A")
    b_major, _ = operand_major(b, "B")
    return KernelSpec(cfg, a.dtype, a_major, b_major, bias is not None)


def grid_block(cfg: DenseGemmConfig, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) the launcher uses for an ``m x n`` output."""
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    return (tiles, 1, 1), (cfg.threads, 1, 1)


def compile_args(
    cfg: DenseGemmConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    stream: Any = None,
) -> tuple[Any, tuple]:
    """``(jit_fn, args)`` such that ``flyc.compile(jit_fn, *args)`` compiles (never launches)
    and ``compiled(*args)`` runs this exact GEMM. Tensors may be CPU or meta stand-ins when
    only compiling. ``bias`` is ``[N]`` or an expanded ``[M, N]`` with strides ``(0, 1)``;
    with ``beta == 0`` it is dropped (the bias-free kernel runs), as ``torch.addmm`` does.
    ``stream``: None (default stream placeholder), a raw ``hipStream_t`` int or a torch stream.
    """
    import flydsl.expr as fx

    from .kernel import build

    m, k = a.shape
    k2, n = b.shape
    if k != k2 or tuple(out.shape) != (m, n):
        raise ValueError(f"shape mismatch: A {tuple(a.shape)}, B {tuple(b.shape)}, out {tuple(out.shape)}")
    if out.stride(1) != 1 and n > 1:
        raise ValueError(f"out must be row-major, strides {tuple(out.stride())}")
    # One compiled kernel per spec: every tensor must have the spec's dtype, or a cached
    # kernel would be fed another element type.
    dtypes = {a.dtype, b.dtype, out.dtype} | ({bias.dtype} if bias is not None else set())
    if len(dtypes) != 1 or a.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"A, B, out and bias must share dtype bf16 or fp16, got {sorted(map(str, dtypes))}")
    _, lda = operand_major(a, "A")
    _, ldb = operand_major(b, "B")
    if bias is not None and beta == 0.0:
        # torch.addmm ignores the bias when beta == 0 (NaN/inf in it must not propagate).
        bias = None
    spec = kernel_spec(cfg, a, b, bias)
    if bias is not None:
        if bias.dim() == 2:  # expanded [M, N] with stride (0, 1): the first row is the vector
            bias = bias[0]
        bias_arg = flat_operand(bias)
    else:
        bias_arg = flat_operand(out)[:1]  # never read; keeps the signature fixed
    args = (
        flat_operand(out),
        flat_operand(a),
        flat_operand(b),
        bias_arg,
        int(m),
        int(n),
        int(k),
        int(lda),
        int(ldb),
        int(out.stride(0)),
        float(alpha),
        float(beta),
        stream if stream is not None else fx.Stream(None),
    )
    return build(spec), args


_COMPILED: dict = {}
_LOCK = threading.Lock()


def _first_use(key, compile_fn) -> tuple[Any, bool]:
    """Run ``compile_fn`` once per key, in the device compile environment, and cache its
    result. Returns ``(result, ran_now)``."""
    hit = _COMPILED.get(key)  # hot path: no lock once compiled
    if hit is not None:
        return hit, False
    from ...runtime.arch import device_arch
    from ...runtime.compile import device_compile_env

    with _LOCK:
        hit = _COMPILED.get(key)
        if hit is not None:
            return hit, False
        with device_compile_env(device_arch(key[1]) or "gfx950"):
            hit = compile_fn()
        _COMPILED[key] = hit
        return hit, True


def launch_key(jit_fn, device: torch.device) -> tuple:
    # A compiled kernel belongs to one process (fork safety) and one device (module loads).
    return (os.getpid(), device.index or 0, jit_fn)


def launch(
    cfg: DenseGemmConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    stream: Any = None,
) -> torch.Tensor:
    """Run ``out = alpha * (a @ b) + beta * bias`` on the current HIP stream (real GPU only).

    The caller has checked eligibility (``config_fits`` and the family gate); this only packs
    arguments. Never call it without HIP: FlyDSL aborts the process on launch without it.
    """
    if not a.is_cuda:
        raise RuntimeError("dense_gemm.launch needs device tensors on a ROCm GPU")
    from ...runtime.probe import flydsl_has_cpu_safe_compile

    if stream is None:
        stream = torch.cuda.current_stream(a.device)
    jit_fn, args = compile_args(cfg, a, b, out, bias, alpha, beta, stream)
    key = launch_key(jit_fn, a.device)
    if flydsl_has_cpu_safe_compile():
        # 0.4+: flyc.compile returns a CompiledFunction without launching; calling it later
        # skips the per-call retrace.
        import flydsl.compiler as flyc

        compiled, _ = _first_use(key, lambda: flyc.compile(jit_fn, *args))
        compiled(*args)
    else:
        # 0.3.x: the jit function compiles on its first call, which also launches it; later
        # calls dispatch by argument types.
        _, launched = _first_use(key, lambda: jit_fn(*args) or True)
        if not launched:
            jit_fn(*args)
    return out
