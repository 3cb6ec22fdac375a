"""The MX scaled GEMM family as the glue sees it (``torch_flydsl.registry``): ``scaled_mm``.

One custom op serves both of PyTorch's entry points once they are reduced to the same
contract: ``torch._scaled_mm`` (v1, reached through ``get_template_configs("scaled_mm")`` on
every torch) and ``torch._scaled_mm_v2`` / ``F.scaled_mm`` (a lowering override on torch 2.13+,
``LOWERING_OVERRIDES``) with BlockWise1x32 recipes and ``NO_SWIZZLE`` scales. The op's
contract: A ``[M, K]`` row-major, B ``[K, N]`` column-major, MXFP8/MXFP4 values, E8M0 scales
``[>= M, K/32]`` / ``[>= N, K/32]`` row-major (unswizzled), bf16/fp16 output, optional bias[N].

Module level holds only the descriptor (read inside ``import torch``); everything else imports
the family's code when first called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..family import CompiledUnit, CustomOp, KernelFamily, LoweringOverride
from ..vocabulary import EXPLAIN, SPEC, Field, TableRule, UserOp

_OPERANDS = "Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None"
_MX_FORMATS = {"mxfp8": ("e4m3", "e4m3"), "mxfp8-e5m2": ("e5m2", "e5m2"), "mxfp4": ("e2m1", "e2m1"),
               "w4a8": ("e4m3", "e2m1")}
DTYPES = tuple(_MX_FORMATS)
# Not an MX format: fp8 with float32 tensor- or row-wise scales. ``explain scaled_mm`` accepts
# it to say why the plugin leaves it to PyTorch.
NON_MX_FP8 = "fp8"
_OUT_DTYPE = Field("out_dtype", str, "bfloat16", ("bfloat16", "float16"), {"bf16": "bfloat16", "fp16": "float16"},
                   formats=frozenset((SPEC, EXPLAIN)), help="the output dtype")
SCALED_MM = UserOp(
    "scaled_mm",
    "MX torch._scaled_mm (--v2: F.scaled_mm), A [M,K] row-major, B [K,N] column-major, unswizzled E8M0 scales "
    "[rows,K/32] as PyTorch's op takes them",
    (Field("m"), Field("n"), Field("k")),
    (Field("dtype", str, "mxfp8", DTYPES, explain_only=(NON_MX_FP8,),
           help="mxfp8 (e4m3), mxfp8-e5m2, mxfp4 (e2m1), w4a8 (A e4m3 x B e2m1); fp8: float32 tensor/row-wise "
                "scales (not MX: declined)"),
     _OUT_DTYPE,
     Field("bias", bool, False, help="a bias[N] of the output dtype"),
     Field("v2", bool, False, formats=frozenset((SPEC, EXPLAIN)),
           help="F.scaled_mm / torch._scaled_mm_v2 instead of torch._scaled_mm")),
    aliases={"scaled_mm_v2": {"v2": True}},
    # Table entries serve bf16 and fp16 outputs alike; precompile builds the bf16 binary (an fp16
    # model names its shapes in a shapes spec with out_dtype float16).
    table=TableRule(spec_defaults={"out_dtype": "bfloat16"}),
    precompile=True,
    bench="torch_flydsl.bench.scaled_mm",
)


# -- Inductor and CLI side: TensorMeta in, problem or Decline out ---------------------------


def _autotunable(problem) -> "Optional[Any]":
    """torch 2.11's autotuner cannot make float4_e2m1fn_x2 benchmark inputs (its rand_strided
    casts float16 noise, which float4 has no copy for; 2.12 draws random bytes)."""
    from ..base import Decline
    from ...runtime.probe import _parse_version

    import torch

    if "e2m1" in (problem.a_format, problem.b_format) and _parse_version(torch.__version__)[:2] < (2, 12):
        return Decline("version", f"torch {torch.__version__}'s autotuner cannot generate float4_e2m1fn_x2 "
                                  "benchmark inputs (fixed in torch 2.12); MXFP8 is served")
    return None


def scale_rows_pytorch_wants(entry: str, rows: int, fmt: str) -> int:
    """Rows of a ``[rows', K/32]`` scale tensor that PyTorch's MX check accepts for an operand
    with ``rows`` rows (M for A, N for B), K a multiple of 128: v1 ``_scaled_mm`` wants
    ``round_up(rows, 128)`` (the 128x4 padded size, read unswizzled on ROCm); v2's ROCm check
    wants ``ceil(rows / 32) * K`` elements for MXFP8 and ``ceil(2 * rows / 32) * K / 2`` for MXFP4."""
    block = 128 if entry == "v1" else (16 if fmt == "e2m1" else 32)
    return -(-rows // block) * block


def _pytorch_scale_rows(entry, problem, scale_a, scale_b):
    """Scale shapes PyTorch's own op would reject on ROCm must keep PyTorch's path (and its
    error), even though the kernel could read them: the plugin never widens an op's contract."""
    from ..base import Decline

    if entry is None:
        return None
    for name, s, rows, fmt in (("scale_a", scale_a, problem.m, problem.a_format),
                               ("scale_b", scale_b, problem.n, problem.b_format)):
        want = scale_rows_pytorch_wants(entry, rows, fmt)
        contiguous = s.shape[0] == 1 or s.stride[0] == s.shape[1]
        if s.shape[0] != want or not contiguous:
            op = "torch._scaled_mm" if entry == "v1" else "torch._scaled_mm_v2"
            return Decline("shape", f"{name} is {list(s.shape)} (strides {s.stride}); {op} takes contiguous "
                                    f"[{want}, K/32] MX scales here, so PyTorch's own check decides this call")
    return None




# -- the custom op's body ---------------------------------------------------------------------


@dataclass
class ScaledCall:
    cfg_key: str
    a: Any
    b: Any
    scale_a: Any
    scale_b: Any
    out: Any
    bias: Optional[Any] = None


# -- precompile and run-only mode (torch_flydsl.deploy) ----------------------------------------


class ScaledGemm(KernelFamily):
    name = "scaled_gemm"
    package = __package__
    config_class = "ScaledGemmConfig"
    custom_ops = (
        CustomOp("scaled_mm_out", f"({_OPERANDS}, *, str cfg, Tensor(a!) out) -> ()", "scaled_mm"),
        # PyTorch's own MX GEMM under the same contract: the ATen choice of the v2 override.
        CustomOp("aten_scaled_mm_out", f"({_OPERANDS}, *, Tensor(a!) out) -> ()", "", baseline=True),
    )
    # On 2.11/2.12 ``_scaled_mm_v2`` has no lowering and its E8M0 scales force an eager
    # fallback before any hook runs; 2.14+ send MX v2 to an eager fallback before any choice.
    lowering_overrides = (LoweringOverride("_scaled_mm_v2", "scaled_mm", (2, 13), "scaled_mm_v2"),)
    user_ops = (SCALED_MM,)

    def problem_for(self, op: str, values: dict):
        import torch

        aten_op = self.serving_for(op, values)
        return self.explain_problem(aten_op, values["m"], values["n"], values["k"], values.get("dtype", "mxfp8"),
                                    out_dtype=getattr(torch, values.get("out_dtype", "bfloat16")),
                                    bias=values.get("bias", False))

    def serving_for(self, op: str, values: dict) -> str:
        return "scaled_mm_v2" if values.get("v2") or op == "scaled_mm_v2" else "scaled_mm"

    def describe(self, op: str, values: dict) -> str:
        bias = " bias" if values.get("bias") else ""
        return f"dtype={values['dtype']} out={values['out_dtype']}{bias} layout=TN (unswizzled E8M0 scales)"

    def scalars_from_node(self, aten_op: str, target: str, args: tuple, kwargs: dict) -> dict:
        """The non-tensor arguments of the FX node being lowered that the gate must see
        (Inductor's scaled_mm lowering hands the choices only the tensors)."""
        if target == "_scaled_mm":
            names: tuple[str, ...] = ("a", "b", "scale_a", "scale_b", "bias", "scale_result", "out_dtype",
                                      "use_fast_accum")
            bound = dict(zip(names, args), **kwargs)
            return {"entry": "v1", "scale_result": bound.get("scale_result") is not None,
                    "out_dtype": bound.get("out_dtype")}
        if target == "_scaled_mm_v2":
            names = ("a", "b", "scale_a", "recipe_a", "swizzle_a", "scale_b", "recipe_b", "swizzle_b", "bias",
                     "out_dtype", "contraction_dim", "use_fast_accum")
            bound = dict(zip(names, args), **kwargs)
            return {
                "entry": "v2",
                "recipe_a": list(bound["recipe_a"]), "recipe_b": list(bound["recipe_b"]),
                "swizzle_a": list(bound["swizzle_a"]), "swizzle_b": list(bound["swizzle_b"]),
                "levels": (len(bound["scale_a"]), len(bound["scale_b"])),
                "contraction_dim": list(bound.get("contraction_dim") or []),
                "out_dtype": bound.get("out_dtype"),
            }
        return {}

    def lowering_operands(self, target: str, args: tuple, kwargs: dict) -> tuple[list, Any]:
        """For a lowering override of ``target``: the custom op's tensor operands (a, b, scale_a,
        scale_b[, bias]: one level of scales) and the output dtype, from the lowering's arguments
        (Inductor IR nodes and Python values). Only the first scale level is taken: the gate sees
        the level count in ``scalars_from_node`` and declines several."""
        names = ("a", "b", "scale_a", "recipe_a", "swizzle_a", "scale_b", "recipe_b", "swizzle_b", "bias",
                 "out_dtype", "contraction_dim", "use_fast_accum")
        bound = dict(zip(names, args), **kwargs)
        tensors = [bound["a"], bound["b"], bound["scale_a"][0], bound["scale_b"][0]]
        if bound.get("bias") is not None:
            tensors.append(bound["bias"])
        return tensors, bound.get("out_dtype")

    def problem_from_metas(self, aten_op: str, inputs: list, out, scalars: dict):
        """``inputs``: (a, b, scale_a, scale_b[, bias]) as TensorMeta; ``scalars`` from
        ``scalars_from_node`` (and, for the v2 override, the recipes and swizzles)."""
        from ..base import Decline
        from .eligibility import check_problem

        levels = scalars.get("levels", (1, 1))
        if levels != (1, 1):
            return Decline("dtype", f"multi-level scales ({levels[0]} x {levels[1]}; two-level NVFP4) are not MX")
        if scalars.get("contraction_dim") not in (None, [], [1, 0]):
            return Decline("layout", f"contraction_dim {scalars['contraction_dim']}: only A's dim 1 with B's dim 0")
        one = lambda v: v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v  # noqa: E731
        a, b, scale_a, scale_b = inputs[:4]
        bias = inputs[4] if len(inputs) > 4 else None
        problem = check_problem(
            a, b, scale_a, scale_b, out, bias,
            out_dtype=scalars.get("out_dtype"),
            scale_recipe_a=one(scalars.get("recipe_a")), scale_recipe_b=one(scalars.get("recipe_b")),
            swizzle_a=one(scalars.get("swizzle_a")), swizzle_b=one(scalars.get("swizzle_b")),
            scale_result=True if scalars.get("scale_result") else None,
        )
        if isinstance(problem, Decline):
            return problem
        return _autotunable(problem) or _pytorch_scale_rows(scalars.get("entry"), problem, scale_a, scale_b) or problem

    def lds_bytes(self, cfg, problem) -> int:
        """The config's static LDS for ``problem`` (it depends on the MX formats and output dtype)."""
        return cfg.lds_bytes(problem.a_fmt, problem.b_fmt, problem.out_dtype)

    def workgroups(self, cfg, problem) -> int:
        """Workgroups the config launches for ``problem`` (explain's table)."""
        from .launcher import grid_block

        return grid_block(cfg, problem.m, problem.n)[0][0]

    def explain_problem(self, aten_op: str, m: int, n: int, k: int, dtype: str = "mxfp8", out_dtype=None, bias: bool = False):
        """The problem an ``M x N x K`` MX GEMM in ``torch._scaled_mm``'s layout poses, or a Decline.
        ``aten_op``: "scaled_mm" (v1) or "scaled_mm_v2" (F.scaled_mm), each with the scale rows it
        asks for; ``dtype``: mxfp8 (e4m3 x e4m3), mxfp8-e5m2, mxfp4 (e2m1 x e2m1) or w4a8 (e4m3 A x
        e2m1 B)."""
        import torch

        from ..base import Decline, TensorMeta
        from .eligibility import check_problem, contiguous_metas
        from .problem import SCALE_BLOCK, SCALE_DTYPE

        if dtype not in _MX_FORMATS:
            return Decline("dtype", f"{dtype} is not an MX format this family knows ({', '.join(DTYPES)}); "
                                    "fp8 with float32 tensor- or row-wise scales stays on PyTorch's path")
        a_format, b_format = _MX_FORMATS[dtype]
        if "e2m1" in (a_format, b_format) and k % 2:
            return Decline("shape", f"K={k} is odd: MXFP4 packs two values per byte")
        a, b, scale_a, scale_b, out, bias_meta = contiguous_metas(m, n, k, a_format, b_format, out_dtype or torch.bfloat16,
                                                                  bias)
        entry = "v2" if aten_op == "scaled_mm_v2" else "v1"
        if k % SCALE_BLOCK == 0:  # else the gate says why
            scale_a = TensorMeta.contiguous((scale_rows_pytorch_wants(entry, m, a_format), k // SCALE_BLOCK), SCALE_DTYPE)
            scale_b = TensorMeta.contiguous((scale_rows_pytorch_wants(entry, n, b_format), k // SCALE_BLOCK), SCALE_DTYPE)
        problem = check_problem(a, b, scale_a, scale_b, out, bias_meta)
        if isinstance(problem, Decline):
            return problem
        return _pytorch_scale_rows(entry, problem, scale_a, scale_b) or problem

    def parse_call(self, custom_op: str, args: tuple, kwargs: dict) -> ScaledCall:
        a, b, scale_a, scale_b, *rest = args
        bias = rest[0] if rest else kwargs.get("bias")
        return ScaledCall(kwargs.get("cfg", "aten"), a, b, scale_a, scale_b, kwargs["out"], bias)

    def check_call(self, call: ScaledCall):
        """(config, problem) for these operands, or a Decline (operands can differ at run time from
        what was lowered). Raises ValueError for a key that is not a scaled-GEMM config."""
        from ..base import TensorMeta
        from .eligibility import check_problem

        of = TensorMeta.of
        return self.checked(call.cfg_key, check_problem(of(call.a), of(call.b), of(call.scale_a), of(call.scale_b),
                                                        of(call.out), TensorMeta.of_optional(call.bias)))

    def run_reference(self, cfg, problem, call: ScaledCall) -> None:
        from .reference import reference

        result = reference(call.a, call.b, call.scale_a, call.scale_b, call.bias, device=call.out.device)
        call.out.copy_(result.to(call.out.dtype))

    def compile_call(self, cfg, problem, call: ScaledCall):
        from .launcher import compile_args

        return compile_args(cfg, call.a, call.b, call.scale_a, call.scale_b, call.out, call.bias, problem=problem)

    def launch(self, cfg, problem, call: ScaledCall) -> None:
        from .launcher import launch

        launch(cfg, call.a, call.b, call.scale_a, call.scale_b, call.out, bias=call.bias, problem=problem)

    def torch_fallback(self, call: ScaledCall) -> None:
        """PyTorch's result for the op's contract (unswizzled BlockWise1x32 scales), said through
        ``_scaled_mm_v2`` so that no build's v1 scale convention can reinterpret it. CPU builds of
        PyTorch have no MX kernel at all: there the exact dequantized product stands in (the op
        reaches the CPU only under the emulator executor)."""
        import torch

        if call.out.device.type == "cpu":
            from .reference import reference

            call.out.copy_(reference(call.a, call.b, call.scale_a, call.scale_b, call.bias).to(call.out.dtype))
            return
        blockwise_1x32, no_swizzle = 3, 0  # F.ScalingType.BlockWise1x32, F.SwizzleType.NO_SWIZZLE
        m, n = call.out.shape
        result = torch._scaled_mm_v2(
            call.a, call.b,
            [call.scale_a[:m]], [blockwise_1x32], [no_swizzle],
            [call.scale_b[:n]], [blockwise_1x32], [no_swizzle],
            call.bias, call.out.dtype,
        )
        call.out.copy_(result)

    def compiled_unit(self, cfg, problem, has_bias: Optional[bool] = None) -> CompiledUnit:
        """One binary per (config, A and B formats, output dtype, bias) serves every M, N, K."""
        bias = problem.bias if has_bias is None else has_bias
        out = str(problem.out_dtype).replace("torch.", "")
        return self.unit(cfg, f"{problem.a_format}.{problem.b_format}", out, f"bias{int(bias)}")

    def placeholder_call(self, cfg, problem, has_bias: Optional[bool] = None):
        """``(jit_fn, args)`` compiling ``compiled_unit``'s kernel as a device call traces it (meta
        tensors in ``torch._scaled_mm``'s layout stand in: nothing is allocated or launched)."""
        from dataclasses import replace

        from ..base import meta_tensor
        from .eligibility import contiguous_metas
        from .launcher import compile_args

        bias = problem.bias if has_bias is None else has_bias
        metas = contiguous_metas(problem.m, problem.n, problem.k, problem.a_format, problem.b_format, problem.out_dtype,
                                 bias)
        a, b, scale_a, scale_b, out = (meta_tensor(m) for m in metas[:5])
        bias_t = None if metas[5] is None else meta_tensor(metas[5])
        return compile_args(cfg, a, b, scale_a, scale_b, out, bias_t, problem=replace(problem, bias=bias))


FAMILY = ScaledGemm()
