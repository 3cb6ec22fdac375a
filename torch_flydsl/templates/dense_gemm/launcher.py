"""Host side of the dense GEMM kernel: argument packing, compile cache, launch.

Launch convention (what ``kernel.build(spec)`` emits):

* grid  = ``(ceil(M / block_m) * ceil(N / block_n), 1, 1)``; block index ``x`` is mapped to
  an output tile inside the kernel (row-major over N tiles, or group-M swizzled);
* block = ``(m_waves * n_waves * 64, 1, 1)``; static LDS only (no dynamic shared memory);
* arguments, in order: ``out, a, b, bias`` as 1-D unit-stride tensors that start at each
  operand's first element and cover its span (``operands.flat_operand``), the split-K
  workspace ``ws`` (``_workspace``: zeroed counters then ``split_k * M * N`` fp32 partials,
  one per device and stream, reused; without split-K one unread element, allocated once per
  device), then ``M, N, K, lda, ldb, ldc`` (int32, elements), ``alpha, beta`` (fp32),
  ``stream``. With split-K the grid is ``split_k`` times larger; still one launch (the last
  workgroup of each output tile reduces it).
  ``lda`` is A's leading stride for its major (row: stride(0), col: stride(1)), same for B;
  ``ldc`` is out's row stride. Without a bias, ``bias`` is any 1-D tensor of the dtype (not read).

One compiled kernel per ``KernelSpec`` (config, dtype, majors, bias on/off) serves every shape:
all sizes, strides and pointers are runtime values.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from ..base import Decline
from ..operands import flat_operand, unread_tensor
from .config import SPLIT_K_COUNTERS, DenseGemmConfig
from .eligibility import check_tensors
from .problem import GemmProblem


@functools.lru_cache(maxsize=None)
def _kernel(cfg: DenseGemmConfig, dtype, a_major: str, b_major: str, has_bias: bool, k_tail: bool):
    """The jit launcher of one kernel variant (cached: building the spec and looking up
    ``kernel.build`` per call would cost more than the rest of the argument packing)."""
    from .kernel import KernelSpec, build

    return build(KernelSpec(cfg, dtype, a_major, b_major, has_bias, k_tail=k_tail))


# Split-K workspaces by (device, stream): counters (zero between launches: each launch's last
# arriver per output tile resets its counter) and room for the partials. Kept for the
# process: counters are zeroed once, when a workspace is made, never per call.
_WORKSPACES: dict = {}
# Outgrown workspaces and those made during a CUDA-graph capture, never freed: a captured
# graph keeps using the address it was captured with.
_KEPT: list = []


def _stream_key(stream):
    if stream is None or isinstance(stream, int):
        return stream
    return getattr(stream, "cuda_stream", None)  # a torch stream; fx.Stream(None): the default


def _workspace(cfg: DenseGemmConfig, m: int, n: int, device, stream=None) -> torch.Tensor:
    """The workspace for one launch: without split-K an unread element; with it
    ``SPLIT_K_COUNTERS`` int32 counters (stored in the fp32 tensor's first elements), then the
    ``split_k * M * N`` fp32 partials.

    The counters must be zero when a launch starts, and the kernel leaves them zero, so one
    workspace per (device, stream) is zeroed once when it is made and reused by every launch
    on that stream (launches on one stream run in order; another stream gets its own, so
    concurrent GEMMs never share counters). Nothing is allocated or zeroed per call: no
    memset launch, and a CUDA graph captured after a warm-up call on its stream replays with
    no host work. One made while the stream is being captured is zeroed by a node of that
    graph only, so it serves that call and is not reused.
    """
    if cfg.split_k == 1:
        return unread_tensor(device, torch.float32)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    if tiles > SPLIT_K_COUNTERS:
        raise ValueError(f"{cfg.key()}: {tiles} output tiles exceed the {SPLIT_K_COUNTERS} split-K counters "
                         "(config_fits declines this problem)")
    need = SPLIT_K_COUNTERS + cfg.split_k * m * n
    if device.type == "meta":
        return torch.empty(need, dtype=torch.float32, device=device)
    key = (device, _stream_key(stream))
    ws = _WORKSPACES.get(key)
    if ws is None or ws.numel() < need:
        size = need if ws is None else max(need, 2 * ws.numel())
        fresh = torch.zeros(size, dtype=torch.float32, device=device)
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            _KEPT.append(fresh)
            return fresh[:need]
        if ws is not None:
            _KEPT.append(ws)
        _WORKSPACES[key] = ws = fresh
    return ws[:need]


def checked_problem(a, b, out, bias=None) -> GemmProblem:
    """The family's eligibility gate for direct callers; raises ``ValueError`` with its reason."""
    problem = check_tensors(a, b, out, bias)
    if isinstance(problem, Decline):
        raise ValueError(f"dense GEMM declines these operands: {problem}")
    return problem


def grid_block(cfg: DenseGemmConfig, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) the launcher uses for an ``m x n`` output."""
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k
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
    problem: Optional[GemmProblem] = None,
) -> tuple[Any, tuple]:
    """``(jit_fn, args)`` such that ``flyc.compile(jit_fn, *args)`` compiles (never launches)
    and ``compiled(*args)`` runs this exact GEMM. Tensors may be CPU or meta stand-ins when
    only compiling. ``bias`` is ``[N]`` or an expanded ``[M, N]`` with strides ``(0, 1)``;
    with ``beta == 0`` it is dropped (the bias-free kernel runs), as ``torch.addmm`` does.
    ``stream``: None (default stream placeholder), a raw ``hipStream_t`` int or a torch stream.
    ``problem``: what the family's gate returned for exactly these operands (the custom op has
    checked them already: one validation per call); without it the gate runs here. One compiled
    kernel per spec: the gate guarantees every tensor has the spec's dtype.
    """
    if problem is None:
        problem = checked_problem(a, b, out, bias)
    m, n, k = problem.m, problem.n, problem.k
    lda = a.stride(0) if problem.a_major == "row" else a.stride(1)
    ldb = b.stride(0) if problem.b_major == "row" else b.stride(1)
    if bias is not None and beta == 0.0:
        # torch.addmm ignores the bias when beta == 0 (NaN/inf in it must not propagate).
        bias = None
    jit_fn = _kernel(cfg, problem.dtype, problem.a_major, problem.b_major, bias is not None, k % cfg.block_k != 0)
    out_flat = flat_operand(out)
    if bias is not None:
        if bias.dim() == 2:  # expanded [M, N] with stride (0, 1): the first row is the vector
            bias = bias[0]
        bias_arg = flat_operand(bias)
    else:
        bias_arg = out_flat  # never read; keeps the signature fixed
    if stream is None:
        import flydsl.expr as fx

        stream = fx.Stream(None)
    args = (
        out_flat,
        flat_operand(a),
        flat_operand(b),
        bias_arg,
        _workspace(cfg, m, n, out.device, stream),
        int(m),
        int(n),
        int(k),
        int(lda),
        int(ldb),
        int(out.stride(0)),
        float(alpha),
        float(beta),
        stream,
    )
    return jit_fn, args


def launch(
    cfg: DenseGemmConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    stream: Any = None,
    problem: Optional[GemmProblem] = None,
) -> torch.Tensor:
    """Run ``out = alpha * (a @ b) + beta * bias`` on the current HIP stream (real GPU only).

    The caller has checked eligibility (``config_fits`` and the family gate, whose ``problem``
    it passes on); this only packs arguments. Never call it without HIP: FlyDSL aborts the
    process on launch without it.
    """
    if not _on_gpu(a):
        raise RuntimeError("dense_gemm.launch needs device tensors on a ROCm GPU")
    if stream is None:
        stream = _current_stream(a.device)
    jit_fn, args = compile_args(cfg, a, b, out, bias, alpha, beta, stream, problem=problem)
    dispatch(jit_fn, args, a.device)
    return out


# The three steps of ``launch`` that need a GPU, apart so that benchmarks/host_cost.py can time
# the rest of the per-call host work on a CPU (it replaces exactly these).
def _on_gpu(t: torch.Tensor) -> bool:
    return t.is_cuda


def _current_stream(device):
    return torch.cuda.current_stream(device)


def dispatch(jit_fn, args: tuple, device) -> None:
    """FlyDSL's part: the kernel compiled once per process and device, then called."""
    from ...runtime import kernel_cache

    kernel_cache.dispatch(jit_fn, args, device)
