"""The dense GEMM family (``torch_flydsl.templates.family``): ``mm`` and ``addmm``.

Module level holds only the class (read inside ``import torch``); its methods import the
family's code when first called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..family import CompiledUnit, CustomOp, KernelFamily
from ..vocabulary import Field, TableRule, UserOp, torch_dtype

_SIZES = (Field("m", help="rows of A and of the output"), Field("n"), Field("k"))
_DTYPE = Field("dtype", str, "bfloat16", ("bfloat16", "float16"), {"bf16": "bfloat16", "fp16": "float16",
                                                                    "fp32": "float32"},
               explain_only=("float32",), help="A, B and output dtype")
_LAYOUT = Field("layout", str, "nt", ("nn", "nt", "tn", "tt"),
                help="n = row-major, t = column-major, for A then B (nt = x @ W.T)")
_BIAS = Field("bias", bool, False, help="addmm with a per-column bias")
MM = UserOp(
    "mm", "torch.mm / addmm (--bias): bf16/fp16 GEMM", _SIZES, (_DTYPE, _LAYOUT, _BIAS),
    table=TableRule(layouts=_LAYOUT.choices, key_dtype=torch_dtype), precompile=True, bench="torch_flydsl.bench.mm",
)



def _operands(aten_op: str, inputs: list, scalars: dict):
    """``(a, b, bias)`` of a node, or a Decline for symbolic alpha/beta."""
    from ..base import Decline

    if aten_op != "addmm":
        (a, b), bias = inputs, None
        return a, b, bias
    alpha, beta = scalars.get("alpha", 1), scalars.get("beta", 1)
    if not all(isinstance(s, (int, float)) for s in (alpha, beta)):
        return Decline("shape", "symbolic alpha/beta")
    bias, a, b = inputs
    return a, b, bias


@dataclass
class DenseCall:
    cfg_key: str
    a: Any
    b: Any
    out: Any
    bias: Optional[Any] = None
    alpha: float = 1.0
    beta: float = 0.0


# check_call's answers by (config key, operand geometries): the gate is a pure function of
# shapes, strides, storage offsets and dtypes, and re-running it costs ~40 us per call (the
# custom op runs it on every call). Bounded: past the limit answers are computed, not stored.
_CHECKED: dict = {}
_CHECKED_LIMIT = 4096


def _geometry(t):
    return None if t is None else (t.shape, t.stride(), t.storage_offset(), t.dtype)


class DenseGemm(KernelFamily):
    name = "dense_gemm"
    package = __package__
    config_class = "DenseGemmConfig"
    custom_ops = (
        CustomOp("dense_mm_out", "(Tensor a, Tensor b, *, str cfg, Tensor(a!) out) -> ()", "mm"),
        CustomOp(
            "dense_addmm_out",
            "(Tensor bias, Tensor a, Tensor b, *, float alpha=1.0, float beta=1.0, str cfg, Tensor(a!) out) -> ()",
            "addmm",
        ),
    )
    user_ops = (MM,)

    # -- the op vocabulary --------------------------------------------------------------------

    def problem_for(self, op: str, values: dict):
        """The problem a contiguous ``layout`` GEMM poses ('t' = stored transposed), or a Decline."""
        return self.explain_problem("addmm" if values.get("bias") else "mm", values["m"], values["n"], values["k"],
                                    torch_dtype(values.get("dtype", "bfloat16")), values.get("layout", "nt"))

    def serving_for(self, op: str, values: dict) -> str:
        return "addmm" if values.get("bias") else "mm"

    def describe(self, op: str, values: dict) -> str:
        return f"dtype={values['dtype']} layout={values['layout']}"

    def explain_problem(self, aten_op: str, m: int, n: int, k: int, dtype, layout: str = "nt"):
        from ..base import TensorMeta
        from .eligibility import check_problem

        a = TensorMeta((m, k), (1, m), dtype) if layout[0] == "t" else TensorMeta.contiguous((m, k), dtype)
        b = TensorMeta((k, n), (1, k), dtype) if layout[1] == "t" else TensorMeta.contiguous((k, n), dtype)
        out = TensorMeta.contiguous((m, n), dtype)
        bias = TensorMeta((m, n), (0, 1), dtype) if aten_op == "addmm" else None
        return check_problem(a, b, out, bias)

    # -- Inductor: TensorMeta in, problem or Decline out ---------------------------------------

    def problem_from_metas(self, aten_op: str, inputs: list, out, scalars: dict):
        """``inputs`` are the node's operands as TensorMeta: (a, b) for mm, (bias, a, b) for addmm."""
        from ..base import Decline
        from .eligibility import check_problem

        ops = _operands(aten_op, inputs, scalars)
        if isinstance(ops, Decline):
            return ops
        a, b, bias = ops
        return check_problem(a, b, out, bias)

    def problem_from_symbolic_metas(self, aten_op: str, inputs: list, out, scalars: dict, facts):
        """``problem_from_metas`` for operands with symbolic sizes, strides or offsets
        (``torch.compile`` dynamic shapes): a ``DynamicM`` (M varies at run time), a
        ``GemmProblem`` (only strides or offsets were symbolic), or a Decline. ``facts``: see
        ``eligibility.check_problem_for_every_m``."""
        from ..base import Decline
        from .eligibility import check_problem_for_every_m

        ops = _operands(aten_op, inputs, scalars)
        if isinstance(ops, Decline):
            return ops
        a, b, bias = ops
        return check_problem_for_every_m(a, b, out, bias, facts=facts)

    def configs_for(self, problem, breadth: str):
        """The configs of ``breadth`` that fit ``problem``, and the others with their reasons.

        For a ``DynamicM`` one compiled choice serves every M, so a config must fit at M's size
        hint and at both ends of M's range; one whose fit changes with M (split-K's does) is
        declined. The ``baseline`` breadth then offers the pick for the hint among configs that
        fit every M."""
        from .config import configs_for as fit
        from .problem import DynamicM

        if not isinstance(problem, DynamicM):
            return fit(problem, breadth)
        if breadth == "baseline":
            return _baseline_for_every_m(problem)
        fitting, declined = fit(problem.at_hint, breadth)
        every_m = []
        for cfg in fitting:
            why = _fits_every_m(cfg, problem)
            if why is None:
                every_m.append(cfg)
            else:
                declined.append((cfg, why))
        return every_m, declined

    def call_kwargs(self, aten_op: str, scalars: dict) -> dict:
        if aten_op != "addmm":
            return {}
        return {"alpha": float(scalars.get("alpha", 1)), "beta": float(scalars.get("beta", 1))}

    def workgroups(self, cfg, problem) -> int:
        """Workgroups the config launches for ``problem`` (split-K included)."""
        from .launcher import grid_block

        return grid_block(cfg, problem.m, problem.n)[0][0]

    # -- the custom ops' body -------------------------------------------------------------------

    def parse_call(self, custom_op: str, args: tuple, kwargs: dict) -> DenseCall:
        if custom_op == "dense_mm_out":
            a, b = args
            return DenseCall(kwargs["cfg"], a, b, kwargs["out"])
        bias, a, b = args
        return DenseCall(kwargs["cfg"], a, b, kwargs["out"], bias, float(kwargs.get("alpha", 1.0)),
                         float(kwargs.get("beta", 1.0)))

    def check_call(self, call: DenseCall):
        """(config, problem) for these operands, or a Decline. Layouts chosen at compile time
        can still differ at run time (a cached graph fed other strides, an input whose flexible
        layout was fixed later), so the custom op re-checks what it got (from a cache keyed by
        the operands' geometry). Raises ValueError for a key that is not a dense config."""
        key = (call.cfg_key, _geometry(call.a), _geometry(call.b), _geometry(call.out), _geometry(call.bias))
        hit = _CHECKED.get(key)
        if hit is None:
            hit = self._check_call(call)  # raises (not cached) for a key that is not a dense config
            if len(_CHECKED) < _CHECKED_LIMIT:
                _CHECKED[key] = hit
        return hit

    def _check_call(self, call: DenseCall):
        from .eligibility import check_tensors

        return self.checked(call.cfg_key, check_tensors(call.a, call.b, call.out, call.bias))

    def run_reference(self, cfg, problem, call: DenseCall) -> None:
        from .reference import reference

        result = reference(call.a, call.b, call.bias, call.alpha, call.beta, device=call.out.device)
        call.out.copy_(result.to(call.out.dtype))

    def compile_call(self, cfg, problem, call: DenseCall):
        return self.module("launcher").compile_args(cfg, call.a, call.b, call.out, call.bias, call.alpha, call.beta,
                                                    problem=problem)

    def launch(self, cfg, problem, call: DenseCall) -> None:
        # ``module`` probes sys.modules: a function-level ``from .launcher import launch`` would
        # cost ~4 us on every call of the custom op.
        self.module("launcher").launch(cfg, call.a, call.b, call.out, bias=call.bias, alpha=call.alpha,
                                       beta=call.beta, problem=problem)

    def torch_fallback(self, call: DenseCall) -> None:
        import torch

        if call.bias is None:
            torch.mm(call.a, call.b, out=call.out)
        else:
            torch.addmm(call.bias.expand(call.out.shape), call.a, call.b, beta=call.beta, alpha=call.alpha,
                        out=call.out)

    # -- precompile and run-only mode -----------------------------------------------------------

    def recorded_shape(self, aten_op: str, inputs: list):
        """``mm``'s values for ``a @ b`` (``addmm``: ``bias + a @ b``); None for a dtype or a
        layout (neither row- nor column-major) the family cannot take, or a full [M, N] addend."""
        from ..base import TensorMeta
        from .problem import major_of

        bias, a, b = inputs if aten_op == "addmm" else (None, *inputs)
        metas = [x if isinstance(x, TensorMeta) else TensorMeta.of(x) for x in (a, b)]
        dtype = str(metas[0].dtype).replace("torch.", "")
        if dtype not in _DTYPE.choices or metas[1].dtype != metas[0].dtype or len(metas[0].shape) != 2 \
                or len(metas[1].shape) != 2:
            return None
        majors = [major_of(m) for m in metas]
        if None in majors:
            return None
        layout = "".join("n" if x == "row" else "t" for x in majors)
        (m, k), n = metas[0].shape, metas[1].shape[1]
        if bias is not None:
            bm = bias if isinstance(bias, TensorMeta) else TensorMeta.of(bias)
            if not (len(bm.shape) == 1 or bm.stride[0] == 0):
                return None  # a full [M, N] addend is not a bias row
        return MM.name, {"dtype": dtype, "layout": layout, "bias": bias is not None, "m": int(m), "n": int(n),
                         "k": int(k)}

    def compiled_unit(self, cfg, problem, has_bias: Optional[bool] = None) -> CompiledUnit:
        """One binary serves every M, N, K of (config, dtype, layout, bias, K tail).
        ``has_bias`` defaults to whether the problem has one (addmm with ``beta == 0`` runs the
        bias-free kernel)."""
        from .problem import DynamicM

        if isinstance(problem, DynamicM):
            problem = problem.at_hint
        bias = problem.bias is not None if has_bias is None else has_bias
        tail = problem.k % cfg.block_k != 0
        dtype = str(problem.dtype).replace("torch.", "")
        return self.unit(cfg, dtype, problem.layout, f"bias{int(bias)}", f"ktail{int(tail)}")

    def placeholder_call(self, cfg, problem, has_bias: Optional[bool] = None):
        import torch
        from dataclasses import replace

        from .launcher import compile_args

        bias = problem.bias is not None if has_bias is None else has_bias
        m, n, k, dt = problem.m, problem.n, problem.k, problem.dtype

        def matrix(rows, cols, major):
            t = torch.empty((rows, cols) if major == "row" else (cols, rows), dtype=dt, device="meta")
            return t if major == "row" else t.t()

        a, b = matrix(m, k, problem.a_major), matrix(k, n, problem.b_major)
        out = torch.empty((m, n), dtype=dt, device="meta")
        bias_t = torch.empty((n,), dtype=dt, device="meta") if bias else None
        return compile_args(cfg, a, b, out, bias_t, problem=replace(problem, bias="row" if bias else None))


def _fits_every_m(cfg, problem) -> "Optional[Any]":
    """None when ``cfg`` fits the ``DynamicM`` at its hint and at both ends of M's range."""
    from dataclasses import replace

    from ..base import Decline
    from .config import config_fits

    hint = problem.at_hint
    d = config_fits(cfg, hint)
    if d is not None:
        return d
    for m in (problem.m_min, problem.m_max):
        d = config_fits(cfg, replace(hint, m=m))
        if d is not None:
            why = d.reason.replace(f"{cfg.key()}: ", "")
            return Decline(d.category, f"{cfg.key()}: fits M={problem.m} at its size hint {hint.m} but not at "
                                       f"M={m} ({why}), and one compiled choice serves every M")
    return None


def _baseline_for_every_m(problem):
    """The autotuning-off pick for a ``DynamicM``: the hint's pick when it fits every M, else the
    by-size pick for the hint among the configs that fit every M (``BASELINE`` past the table)."""
    from . import config

    hint_pick = config.baseline_for(problem.at_hint)
    why = _fits_every_m(hint_pick, problem)
    if why is None:
        return [hint_pick], []
    pick = config.baseline_for(problem.at_hint, fits=lambda cfg: _fits_every_m(cfg, problem) is None)
    later = _fits_every_m(pick, problem)
    return ([pick], [(hint_pick, why)]) if later is None else ([], [(hint_pick, why), (pick, later)])


FAMILY = DenseGemm()
