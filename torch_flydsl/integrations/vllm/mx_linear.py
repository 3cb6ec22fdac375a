"""What the MX linear re-routes (``mx``: MXFP8, ``mxfp4``: MXFP4) share: the body of their
opaque op, which looks the call's M up in the dispatch table and runs the scaled family on a hit
(quantizing the activations first), or hands the call back to vLLM's kernel."""

from __future__ import annotations

import functools
from typing import Callable, Optional

from .common import batch_invariant, serve_or_miss

# The element dtype each dispatch-table MX format's ``[N, K_bytes]`` weight bytes are read as.
_ELEMENT = {"mxfp8": "float8_e4m3fn", "mxfp4": "float4_e2m1fn_x2"}


K_ALIGN = 128  # the scaled MFMA consumes 128 K values per step (the family's K multiple)


def route_by_table(fmt: str, n: int, k: int) -> Optional[str]:
    """The last part of a layer's route decision at load, once its weights have the format's
    shapes: why it keeps vLLM's kernel whatever M (None: the table decides per call)."""
    from ... import dispatch_table
    from ...deploy.record import recording

    if k % K_ALIGN:
        return f"K={k} is not a multiple of {K_ALIGN}"
    if batch_invariant():
        return "VLLM_BATCH_INVARIANT"
    if recording():
        return None  # every call reaches the op, which records it (and keeps vLLM's kernel on a miss)
    if not dispatch_table.active().names_weight("scaled_mm", fmt, n, k):
        return "no dispatch-table entry for this [N, K]"
    return None


@functools.lru_cache(maxsize=None)
def _serve_deps():
    """What ``serve`` needs, imported once (function-level imports cost ~1 us each per call)."""
    import torch

    from ... import dispatch_table, ops
    from ...deploy import record
    from ...registry import family_for

    return torch, dispatch_table.active, ops.try_run, family_for("scaled_mm"), record


def serve(fmt: str, quantize: Callable, x, weight, weight_scale, bias):
    """(output, config) when FlyDSL ran, else (None, why not). ``x`` is ``[M, K]`` bf16/fp16;
    ``weight`` the layer's ``[N, K_bytes]`` weight bytes in ``fmt`` (``mxfp8``: fp8 e4m3,
    ``mxfp4``: two E2M1 values per uint8) and ``weight_scale`` its ``[N, K/32]`` E8M0 codes;
    ``quantize(x)`` gives the activations' ``(values, E8M0 codes)`` in the same format."""
    torch, active, try_run, family, record = _serve_deps()
    m, k = x.shape
    n = weight.shape[0]
    if record.recording():
        record.note_shape(record.Shape.of("scaled_mm", dtype=fmt, out_dtype=str(x.dtype).replace("torch.", ""),
                                           bias=bias is not None, m=m, n=n, k=k))
    cfg = active().lookup("scaled_mm", fmt, "nt", bias is not None, m, n, k)
    if cfg is None:
        return None, "shape not in the dispatch table"
    if m == 0:
        return None, "empty"
    if x.dtype not in (torch.bfloat16, torch.float16):
        return None, f"activations are {x.dtype}, not bf16/fp16"
    if bias is not None and (bias.dtype != x.dtype or bias.dim() != 1 or bias.shape[0] != n):
        return None, "bias is not an [N] vector of the activations' dtype"
    x_q, x_scale = quantize(x)
    element = getattr(torch, _ELEMENT[fmt])
    out = x.new_empty((m, n))
    e8m0 = torch.float8_e8m0fnu
    why = try_run(family, "scaled_mm_out",
                  (x_q.view(element), weight.view(element).t(), x_scale.view(e8m0), weight_scale.view(e8m0), bias),
                  {"cfg": cfg, "out": out})
    if why is not None:
        return None, f"FlyDSL {cfg} cannot run: {why}"
    return out, cfg


def run(op_name: str, fmt: str, quantize: Callable, miss: Callable, x, weight, weight_scale, bias):
    """The op's body: ``serve`` (a bug of ours becomes a miss and one warning), else ``miss()``,
    vLLM's own kernel on the same call (``common.serve_or_miss``)."""
    def where() -> str:
        return f"M={x.shape[0]} N={weight.shape[0]} K={x.shape[1]} {str(x.dtype).replace('torch.', '')} " \
               f"bias={bias is not None}"

    return serve_or_miss(op_name, serve, (fmt, quantize, x, weight, weight_scale, bias), miss, where)
