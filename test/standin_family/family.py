"""A stand-in kernel family (plumbing tests only): one user op, ``standin_gemm``, with a table
rule, precompile support and a bench suite, and no kernel at all. A test registers it with
``torch_flydsl.registry.register("standin_family.family")`` (``test/`` on ``sys.path``)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_flydsl.templates.family import CompiledUnit, KernelFamily
from torch_flydsl.templates.vocabulary import Field, TableRule, UserOp, torch_dtype

STANDIN_GEMM = UserOp(
    "standin_gemm", "a stand-in op for registry plumbing tests (no kernel)",
    (Field("m"), Field("n"), Field("k")),
    (Field("dtype", str, "bfloat16", ("bfloat16", "float16"), {"bf16": "bfloat16"}),),
    table=TableRule(bias=False, key_dtype=torch_dtype),
    precompile=True,
    bench="standin_family.bench",
)


@dataclass(frozen=True)
class StandinProblem:
    m: int
    n: int
    k: int
    dtype: object


class StandinFamily(KernelFamily):
    name = "standin_family"
    package = __package__
    config_class = "StandinConfig"
    user_ops = (STANDIN_GEMM,)

    def problem_for(self, op: str, values: dict):
        from torch_flydsl.templates.base import Decline

        if values["m"] == 0:
            return Decline("shape", "M=0: nothing to compute")
        return StandinProblem(values["m"], values["n"], values["k"], torch_dtype(values["dtype"]))

    def compiled_unit(self, cfg, problem, has_bias=None) -> CompiledUnit:
        return self.unit(cfg, str(problem.dtype).replace("torch.", ""))

    def placeholder_call(self, cfg, problem, has_bias=None):
        raise NotImplementedError("the stand-in family has no kernel to build")


FAMILY = StandinFamily()
