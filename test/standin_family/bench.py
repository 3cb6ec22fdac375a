"""The stand-in family's bench suite (plumbing tests only: it plans, never measures)."""

from torch_flydsl.bench.report import Baseline
from torch_flydsl.bench.shapes import Field
from torch_flydsl.bench.suite import Suite, plan_keys


def _plan(rec, args):
    from .family import FAMILY

    problem = FAMILY.problem_for("standin_gemm", {"m": rec["M"], "n": rec["N"], "k": rec["K"], "dtype": "bfloat16"})
    return plan_keys(problem, lambda p: FAMILY.configs_for(p, "curated")[0])


def _measure(recs, args):
    raise RuntimeError("the stand-in family has no kernel to time")


BENCH = Suite(
    op="standin_gemm",
    intree_op="standin_gemm",
    title="stand-in GEMM (plumbing only)",
    fields=(Field("M"), Field("N"), Field("K")),
    seed=lambda: [{"M": 16, "N": 32, "K": 64}],
    label=lambda r: f"{r['M']}x{r['N']}x{r['K']}",
    plan=_plan,
    options=lambda argv: __import__("argparse").Namespace(warmup=1, iters=1),
    measure=_measure,
    aten=Baseline("aten", "ATen", "aten_ms"),
    columns=("M", "N", "K"),
)
