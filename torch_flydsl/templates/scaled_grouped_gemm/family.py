"""The MXFP8 grouped GEMM family as the glue sees it (``torch_flydsl.registry``).

No Inductor seam: every torch from 2.11 to 2.15 sends MXFP8 grouped GEMM nodes to the eager op
before any lowering (their E8M0 scales are not allowed through Inductor), and ROCm's ATen has
no kernel for it. So the family serves ``aten::_scaled_grouped_mm_v2`` (``F.scaled_grouped_mm``)
eagerly (``torch_flydsl.eager``), which compiled graphs reach through that same fallback.
Module level holds only the class; its methods import the family's code lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..family import EagerOverride, KernelFamily

BLOCKWISE_1X32, NO_SWIZZLE = 3, 0  # F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE
_V2_ARGS = ("a", "b", "scale_a", "recipe_a", "swizzle_a", "scale_b", "recipe_b", "swizzle_b", "offs", "bias",
            "out_dtype", "contraction_dim", "use_fast_accum")


@dataclass
class ScaledGroupedCall:
    a: Any
    b: Any
    scale_a: Any
    scale_b: Any
    offs: Any
    out: Any


def _recipe_decline(v: dict):
    from ..base import Decline

    if (len(v["scale_a"]), len(v["scale_b"])) != (1, 1):
        return Decline("dtype", "multi-level scales are not MX")
    if list(v["recipe_a"]) != [BLOCKWISE_1X32] or list(v["recipe_b"]) != [BLOCKWISE_1X32]:
        return Decline("dtype", f"recipes {list(v['recipe_a'])} x {list(v['recipe_b'])} are not BlockWise1x32 (MX)")
    if list(v["swizzle_a"]) != [NO_SWIZZLE] or list(v["swizzle_b"]) != [NO_SWIZZLE]:
        return Decline("layout", f"swizzles {list(v['swizzle_a'])} x {list(v['swizzle_b'])}: the kernel reads "
                                 "unswizzled (NO_SWIZZLE) scales only")
    if list(v.get("contraction_dim") or []) not in ([], [1, 1], [1, 0]):
        return Decline("layout", f"contraction_dim {list(v['contraction_dim'])} is not supported")
    return None


class ScaledGroupedGemm(KernelFamily):
    name = "scaled_grouped_gemm"
    package = __package__
    config_class = "ScaledGroupedConfig"
    eager_overrides = (EagerOverride("_scaled_grouped_mm_v2", "scaled_grouped_mm"),)

    def lds_bytes(self, cfg, problem) -> int:
        return cfg.lds_bytes(problem.a_fmt, problem.b_fmt, problem.out_dtype)

    def eager_call(self, target: str, args: tuple, kwargs: dict):
        """``(call, config, problem)`` for an eligible ``_scaled_grouped_mm_v2`` call (output
        allocated), or a Decline. The config: the family's pick for the problem (no autotuning
        reaches this op)."""
        import torch

        from ..base import Decline, TensorMeta
        from .config import configs_for
        from .eligibility import check_problem

        v = dict(zip(_V2_ARGS, args), **kwargs)
        d = _recipe_decline(v)
        if d:
            return d
        a, b, offs = v["a"], v["b"], v.get("offs")
        out_dtype = v.get("out_dtype") or torch.bfloat16
        if a.dim() != 2 or b.dim() != 3:
            return Decline("shape", f"{a.dim()}-D x {b.dim()}-D: only 2-D A x 3-D B with offs (the MoE forward)")
        out_meta = TensorMeta.contiguous((a.shape[0], b.shape[2]), out_dtype, a.device.type)
        of, maybe = TensorMeta.of, TensorMeta.of_optional
        problem = check_problem(of(a), of(b), of(v["scale_a"][0]), of(v["scale_b"][0]), maybe(offs), out_meta,
                                maybe(v.get("bias")))
        if isinstance(problem, Decline):
            return problem
        fitting, declined = configs_for(problem, "baseline")
        if not fitting:
            return declined[0][1]
        out = torch.empty(a.shape[0], b.shape[2], dtype=out_dtype, device=a.device)
        return ScaledGroupedCall(a, b, v["scale_a"][0], v["scale_b"][0], offs, out), fitting[0], problem

    def run_reference(self, cfg, problem, call: ScaledGroupedCall) -> None:
        from .reference import reference

        call.out.copy_(reference(call.a, call.b, call.scale_a, call.scale_b, call.offs, out=call.out.float())
                       .to(call.out.dtype))

    def run_emulated(self, cfg, problem, call: ScaledGroupedCall):
        from .launcher import run_emulated

        return run_emulated(cfg, call.a, call.b, call.scale_a, call.scale_b, call.offs, call.out, problem=problem)

    def launch(self, cfg, problem, call: ScaledGroupedCall) -> None:
        from .launcher import launch

        launch(cfg, call.a, call.b, call.scale_a, call.scale_b, call.offs, call.out, problem=problem)


FAMILY = ScaledGroupedGemm()
