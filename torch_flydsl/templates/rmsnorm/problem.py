"""The RMSNorm forward problem: ``aten::_fused_rms_norm(input, normalized_shape, weight, eps)``
(what ``F.rms_norm`` reaches on CUDA/ROCm) over the last dimension.

``input`` is viewed as ``[rows, n]`` (every leading dimension folded into rows, ``n`` = the one
normalized dimension); ``weight`` is ``[n]`` or absent. Outputs: ``y`` with the input's shape and
dtype, and ``rstd = 1 / sqrt(mean(x^2) + eps)`` in float32 with shape ``input.shape[:-1] + (1,)``
(what PyTorch's backward reads). Math is fp32 whatever the input dtype; ``y`` is rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class RmsNormProblem:
    rows: int
    n: int
    dtype: torch.dtype
    has_weight: bool

    @property
    def vec(self) -> int:
        """Elements per 16-byte vector."""
        return 16 // self.dtype.itemsize


def default_eps(eps) -> float:
    """PyTorch's ``eps=None``: the epsilon of the fp32 compute type for fp32/fp16/bf16 inputs
    (``torch.finfo(torch.float32).eps``; F.rms_norm's doc says ``finfo(input.dtype).eps``, but the
    composite, the decomposition and the CUDA kernel all use the opmath type's; test_rmsnorm_eager
    checks it against this torch)."""
    return torch.finfo(torch.float32).eps if eps is None else float(eps)
