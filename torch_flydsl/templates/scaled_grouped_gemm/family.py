"""The MXFP8 grouped GEMM family as the glue sees it (``torch_flydsl.registry``):
``scaled_grouped_mm``.

No Inductor seam: every torch from 2.11 to 2.15 sends MXFP8 grouped GEMM nodes to the eager op
before any lowering (their E8M0 scales are not allowed through Inductor), and ROCm's ATen has
no kernel for it. So the family serves ``aten::_scaled_grouped_mm_v2`` (``F.scaled_grouped_mm``)
eagerly (``torch_flydsl.eager``), which compiled graphs reach through that same fallback, and
vLLM's MXFP8 fused-MoE experts (``integrations.vllm.moe_mx``), which run its
``scaled_grouped_mm_out`` call form through ``ops.try_run`` for the shapes a dispatch table names.
That call form is no torch op (nothing traces it: vLLM's MoE forward is opaque to its graphs).

Its user op ``scaled_grouped_mm`` (the MoE forward: ``m`` routed rows over ``groups`` experts)
is what dispatch tables, precompile specs, recorded shapes and ``explain`` name.
Module level holds only the class and the vocabulary; its methods import the family's code
lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..family import CompiledUnit, EagerOverride, KernelFamily
from ..vocabulary import EXPLAIN, SPEC, Field, TableRule, UserOp

BLOCKWISE_1X32, NO_SWIZZLE = 3, 0  # F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE
FORMAT = "mxfp8"  # the one MX format of the kernel's operands: e4m3 x e4m3
CALL_FORM = "scaled_grouped_mm_out"  # the call ops.try_run parses: (a, b, scale_a, scale_b, offs, *, cfg, out)
SCALED_GROUPED_MM = UserOp(
    "scaled_grouped_mm",
    "MXFP8 MoE forward (F.scaled_grouped_mm, vLLM's MXFP8 fused-MoE experts): A [M,K] e4m3 row-major (M: the "
    "routed rows of all experts) x B [G,K,N] e4m3 column-major per expert (stored [G,N,K]), unswizzled E8M0 "
    "scales per 32 K values, int32 offs [G] on the device, no bias",
    (Field("m", help="routed rows (tokens x top-k)"), Field("n"), Field("k")),
    (Field("groups", help="G: experts (groups)"),
     Field("dtype", str, FORMAT, (FORMAT,), explain_only=("mxfp4",),
           help="mxfp8: e4m3 activations x e4m3 weights; mxfp4: not supported (explain says why)"),
     Field("out_dtype", str, "bfloat16", ("bfloat16", "float16"), {"bf16": "bfloat16", "fp16": "float16"},
           formats=frozenset((SPEC, EXPLAIN)), help="the output dtype")),
    # Table entries serve bf16 and fp16 outputs alike; precompile builds the bf16 binary (name an
    # fp16 output in a shapes spec).
    table=TableRule(bias=False, groups=True, spec_defaults={"out_dtype": "bfloat16"}),
    precompile=True,
)
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
    cfg_key: str = ""  # the config a CALL_FORM call names (eager calls carry the config itself)


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
    user_ops = (SCALED_GROUPED_MM,)

    def lds_bytes(self, cfg, problem) -> int:
        return cfg.lds_bytes(problem.a_fmt, problem.b_fmt, problem.out_dtype)

    def workgroups(self, cfg, problem) -> int:
        """The persistent grid the config launches for ``problem`` (explain's table)."""
        from .launcher import workgroups_for

        return workgroups_for(cfg, problem)

    # -- the op vocabulary -------------------------------------------------------------------------

    def problem_for(self, op: str, values: dict):
        import torch

        return self.explain_problem(values["m"], values["n"], values["k"], values["groups"],
                                    values.get("dtype", FORMAT), getattr(torch, values.get("out_dtype", "bfloat16")))

    def describe(self, op: str, values: dict) -> str:
        return (f"groups={values['groups']} dtype={values['dtype']} out={values['out_dtype']}: A [M,K] row-major x "
                "B [G,K,N] column-major per expert, unswizzled E8M0 scales, int32 offs")

    def explain_problem(self, m: int, n: int, k: int, groups: int, dtype: str = FORMAT, out_dtype=None):
        """The problem an MoE forward of ``m`` routed rows over ``groups`` experts poses in the
        layout its callers use (``eligibility.moe_forward_metas``), or a Decline."""
        import torch

        from ..base import Decline
        from .eligibility import check_problem, moe_forward_metas

        if dtype != FORMAT:
            return Decline("dtype", f"{dtype}: the MXFP8 grouped kernel takes e4m3 x e4m3 operands only (its "
                                    "launcher, gate and reference have no fp4 path)")
        return check_problem(*moe_forward_metas(m, n, k, groups, out_dtype or torch.bfloat16))

    # -- the call form vLLM's MXFP8 MoE route runs (ops.try_run) --------------------------------------

    def parse_call(self, custom_op: str, args: tuple, kwargs: dict) -> ScaledGroupedCall:
        """``CALL_FORM``: ``(a, b, scale_a, scale_b, offs, *, cfg, out)`` in the op's contract."""
        if custom_op != CALL_FORM:
            raise ValueError(f"{self.name} runs {CALL_FORM!r} calls, not {custom_op!r}")
        a, b, scale_a, scale_b, offs = args
        return ScaledGroupedCall(a, b, scale_a, scale_b, offs, kwargs["out"], kwargs["cfg"])

    def check_call(self, call: ScaledGroupedCall):
        """(config, problem) for these operands, or a Decline; ValueError for a key that is not
        an MXFP8 grouped config."""
        from .eligibility import check_tensors

        return self.checked(call.cfg_key, check_tensors(call.a, call.b, call.scale_a, call.scale_b, call.offs,
                                                        call.out))

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

    # -- precompile and run-only mode (torch_flydsl.deploy) ------------------------------------------

    def compiled_unit(self, cfg, problem, has_bias: Optional[bool] = None) -> CompiledUnit:
        """One binary per (config, A and B formats, output dtype) serves every routed-row count,
        N, K and expert count (all run-time values)."""
        out = str(problem.out_dtype).replace("torch.", "")
        return self.unit(cfg, f"{problem.a_format}.{problem.b_format}", out)

    def placeholder_call(self, cfg, problem, has_bias: Optional[bool] = None):
        """``(jit_fn, args)`` compiling ``compiled_unit``'s kernel as a call traces it (meta
        tensors in the MoE forward's layout stand in: nothing is allocated or launched)."""
        from ..base import meta_tensor
        from .eligibility import moe_forward_metas
        from .launcher import compile_args

        a, b, scale_a, scale_b, offs, out = (meta_tensor(m) for m in moe_forward_metas(
            max(problem.tokens, 1), problem.n, problem.k, problem.groups, problem.out_dtype))
        return compile_args(cfg, a, b, scale_a, scale_b, offs, out, problem=problem)


FAMILY = ScaledGroupedGemm()
