"""The grouped GEMM family as the glue sees it (``torch_flydsl.registry``): ``grouped_mm``.

Inductor's ``_grouped_mm`` lowering builds its choice list by hand (ATen, Triton's grouped
template, ...), so the family joins through a ``ChoiceHook``: its choices are appended to that
list when it is autotuned. Module level holds only the descriptor (read inside ``import
torch``); everything else imports the family's code when first called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..family import ChoiceHook, CompiledUnit, CustomOp, KernelFamily
from ..vocabulary import SPEC, EXPLAIN, Field, TableRule, UserOp, torch_dtype

GROUPED_MM = UserOp(
    "grouped_mm",
    "torch._grouped_mm MoE forward: A [M,K] row-major (M: the tokens of all experts) x B [G,K,N], int32 offs [G] "
    "on the device, no bias",
    (Field("m", help="routed rows (tokens x top-k)"), Field("n"), Field("k")),
    (Field("groups", help="G: experts (groups)"),
     Field("dtype", str, "bfloat16", ("bfloat16", "float16"), {"bf16": "bfloat16", "fp16": "float16"}),
     Field("b_major", str, "col", ("col", "row"), formats=frozenset((SPEC, EXPLAIN)),
           help="each expert's [K,N] matrix: col = stored [G,N,K] (K contiguous, the usual weight layout), "
                "row = N contiguous"),
     Field("top_k", int, 1, formats=frozenset((SPEC,)),
           help="experts per token, where the MoE call is known (the vLLM MoE route records it): m / top_k are "
                "the call's tokens, which bench grouped_mm's vLLM column picks its config by")),
    # Table entries are the MoE forward's: each expert's weight stored [N, K] (B col-major).
    table=TableRule(bias=False, groups=True, key_dtype=torch_dtype, spec_defaults={"b_major": "col"}),
    precompile=True,
    bench="torch_flydsl.bench.grouped_mm",
)


# -- Inductor and CLI side: TensorMeta in, problem or Decline out ---------------------------


# -- the custom op's body ---------------------------------------------------------------------


@dataclass
class GroupedCall:
    cfg_key: str
    a: Any
    b: Any
    offs: Any  # None for 3-D x 3-D
    out: Any


# -- precompile and run-only mode (torch_flydsl.deploy) ----------------------------------------


class GroupedGemm(KernelFamily):
    """Inductor's ``_grouped_mm`` lowering builds its choice list by hand, so the family joins
    through a ``ChoiceHook``: its choices are appended to that list when it is autotuned."""

    name = "grouped_gemm"
    package = __package__
    config_class = "GroupedGemmConfig"
    custom_ops = (
        CustomOp("grouped_mm_out", "(Tensor a, Tensor b, Tensor? offs=None, *, str cfg, Tensor(a!) out) -> ()",
                 "grouped_mm"),
    )
    choice_hooks = (ChoiceHook("_grouped_mm", "grouped_mm"),)
    user_ops = (GROUPED_MM,)

    def problem_for(self, op: str, values: dict):
        return self.explain_problem(op, values["m"], values["n"], values["k"], torch_dtype(values["dtype"]),
                                    groups=values["groups"], b_major=values.get("b_major", "col"))

    def describe(self, op: str, values: dict) -> str:
        return (f"groups={values['groups']} dtype={values['dtype']}: A [M,K] row-major x B [G,K,N] "
                f"{values['b_major']}-major per expert, int32 offs")

    def scalars_from_node(self, aten_op: str, target: str, args: tuple, kwargs: dict) -> dict:
        """``_grouped_mm(a, b, offs=None, bias=None, out_dtype=None)``: the lowering hands the
        choices a, b and offs only, so the gate reads bias and out_dtype here."""
        bound = dict(zip(("a", "b", "offs", "bias", "out_dtype"), args), **kwargs)
        return {"bias": bound.get("bias") is not None, "out_dtype": bound.get("out_dtype"),
                "offs": bound.get("offs") is not None}

    def problem_from_metas(self, aten_op: str, inputs: list, out, scalars: dict):
        """``inputs``: (a, b[, offs]) as TensorMeta, as the lowering binds them (3-D x 3-D: no offs)."""
        from ..base import Decline
        from .eligibility import check_problem

        if scalars.get("bias"):
            return Decline("shape", "a bias is not supported")
        a, b = inputs[:2]
        offs = inputs[2] if len(inputs) > 2 else None
        return check_problem(a, b, offs, out, out_dtype=scalars.get("out_dtype"))

    def workgroups(self, cfg, problem) -> int:
        """Persistent workgroups the config launches for ``problem`` (explain's table)."""
        from .launcher import grid_block

        return grid_block(cfg, problem.tokens, problem.groups, problem.n, None, problem.along_k)[0][0]

    def explain_problem(self, aten_op: str, m: int, n: int, k: int, dtype, groups: int = 8, b_major: str = "col"):
        """The problem an MoE forward with ``m`` tokens over ``groups`` experts poses (A [m, k]
        row-major, B [groups, k, n] with each expert's matrix ``b_major``), or a Decline."""
        import torch

        from ..base import TensorMeta
        from .eligibility import check_problem

        a = TensorMeta.contiguous((m, k), dtype)
        if b_major == "col":
            b = TensorMeta((groups, k, n), (n * k, 1, k), dtype)
        else:
            b = TensorMeta.contiguous((groups, k, n), dtype)
        offs = TensorMeta.contiguous((groups,), torch.int32)
        return check_problem(a, b, offs, TensorMeta.contiguous((m, n), dtype))

    def parse_call(self, custom_op: str, args: tuple, kwargs: dict) -> GroupedCall:
        a, b, *rest = args
        offs = rest[0] if rest else kwargs.get("offs")
        return GroupedCall(kwargs["cfg"], a, b, offs, kwargs["out"])

    def check_call(self, call: GroupedCall):
        """(config, problem), or a Decline; ValueError for a key that is not a grouped config."""
        from .eligibility import check_tensors

        return self.checked(call.cfg_key, check_tensors(call.a, call.b, call.offs, call.out))

    def run_reference(self, cfg, problem, call: GroupedCall) -> None:
        from .reference import reference

        call.out.copy_(reference(call.a, call.b, call.offs, call.out.device, out=call.out).to(call.out.dtype))

    def run_emulated(self, cfg, problem, call: GroupedCall):
        """No tokens (or no K rows) run nothing, as on the device (``emulated.run_emulated``)."""
        from .emulated import run_emulated

        return run_emulated(cfg, call.a, call.b, call.offs, call.out, problem=problem)

    def launch(self, cfg, problem, call: GroupedCall) -> None:
        from .launcher import launch

        launch(cfg, call.a, call.b, call.offs, call.out, problem=problem)

    def torch_fallback(self, call: GroupedCall) -> None:
        import torch

        call.out.copy_(torch._grouped_mm(call.a, call.b, offs=call.offs))

    def compiled_unit(self, cfg, problem, has_bias: Optional[bool] = None) -> CompiledUnit:
        """One binary per (config, dtype, B's major, operand form) serves every token count, N,
        K and expert count."""
        form = "alongk" if problem.along_k else "batched" if problem.batched else "2d3d"
        dtype = str(problem.dtype).replace("torch.", "")
        return self.unit(cfg, dtype, f"b{problem.b_major}", form)

    def placeholder_call(self, cfg, problem, has_bias: Optional[bool] = None):
        """``(jit_fn, args)`` compiling ``compiled_unit``'s kernel for the MoE forward form (A [T, K]
        x B [G, K, N], int32 offs) with meta tensors; other forms are not precompiled yet."""
        import torch

        from ..base import TensorMeta, meta_tensor
        from .launcher import compile_args

        if problem.batched or problem.along_k:
            raise NotImplementedError("precompile builds the 2-D x 3-D (MoE forward) grouped kernel only")
        t, n, k, g, dt = problem.tokens, problem.n, problem.k, problem.groups, problem.dtype
        b = TensorMeta((g, k, n), (n * k, 1, k), dt) if problem.b_major == "col" else TensorMeta.contiguous((g, k, n), dt)
        a, b_t, offs, out = (meta_tensor(m) for m in (TensorMeta.contiguous((t, k), dt), b,
                                                       TensorMeta.contiguous((g,), torch.int32),
                                                       TensorMeta.contiguous((t, n), dt)))
        return compile_args(cfg, a, b_t, offs, out, problem=problem)


FAMILY = GroupedGemm()
