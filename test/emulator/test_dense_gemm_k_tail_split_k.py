"""Dense GEMM K tails and split-K in the CPU emulator.

K tails: any K the family gate accepts (a multiple of 8 when an operand is contiguous along K,
anything otherwise), including K below one tile; the last K tile's DMAs past K read zeros, so
non-finite values stored just past K (row padding of a K-contiguous operand, rows after the
last K row of an M/N-contiguous one) never reach the output. Split-K: partial tiles in an
fp32 workspace, summed in split order by the tile's last workgroup in the same launch, with
bias, alpha/beta, M/N/K tails (more in ``test_dense_gemm_split_k_one_launch.py``).
Each case runs against the float64 reference under the accuracy contract of ``dense_cases``
(harness: no checker findings, every output written, nothing else touched).
"""

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.templates.dense_gemm import reference  # noqa: E402
from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig, config_fits  # noqa: E402
from torch_flydsl.templates.dense_gemm.emulated import run_emulated  # noqa: E402
from torch_flydsl.templates.dense_gemm.launcher import checked_problem  # noqa: E402

from dense_cases import emulate_gemm  # noqa: E402

pytestmark = pytest.mark.emulator

SMALL = DenseGemmConfig(64, 64, 64, 2, 2, 4, 0)


@pytest.mark.parametrize("layout, k", [("nt", 200), ("nn", 8), ("tn", 13), ("tt", 72), ("tn", 64 * 5 + 3)])
def test_k_tails_every_layout(layout, k):
    rep = emulate_gemm(SMALL, 70, 40, k, layout, pad=8, offset=8, bias="vector", alpha=0.5, beta=2.0, seed=k)
    assert rep.ok, rep


@pytest.mark.parametrize("layout", ["nt", "tn"])
def test_non_finite_values_just_past_k_never_reach_the_output(layout):
    m, n, k, extra = 24, 40, 100 if layout == "tn" else 104, 16
    torch.manual_seed(0)
    if layout == "nt":
        # K-contiguous operands with their rows padded: Inf/NaN in the padding past K.
        a_store = torch.full((m, k + extra), float("inf"), dtype=torch.bfloat16)
        b_store = torch.full((n, k + extra), float("nan"), dtype=torch.bfloat16)
        a, b = a_store[:, :k], b_store[:, :k].t()
    else:
        # M/N-contiguous operands: rows after the last K row hold Inf/NaN.
        a_store = torch.full((k + extra, m), float("inf"), dtype=torch.bfloat16)
        b_store = torch.full((k + extra, n), float("nan"), dtype=torch.bfloat16)
        a, b = a_store[:k].t(), b_store[:k]
    a.copy_(torch.randn(m, k))
    b.copy_(torch.randn(k, n))
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    rep = run_emulated(SMALL, a, b, out)
    assert not rep.findings
    ref = reference(a, b, None, 1.0, 1.0)
    assert torch.isfinite(out).all()
    assert (out.double() - ref).abs().max() <= 2 * 2**-8 * ref.abs().max()


@pytest.mark.parametrize(
    "cfg, m, n, k, layout, dtype, bias",
    [
        (DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4), 5, 72, 1000, "nt", torch.bfloat16, "vector"),
        (DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 8), 1, 130, 16 * 128, "nt", torch.float16, None),
        (DenseGemmConfig(32, 64, 128, 2, 2, 3, 0, 4), 34, 40, 8 * 128 - 8, "tn", torch.bfloat16, "expanded"),
    ],
    ids=["sk4-bias-ktail", "sk8-fp16", "sk4-tn-expanded-bias"],
)
def test_split_k(cfg, m, n, k, layout, dtype, bias):
    rep = emulate_gemm(cfg, m, n, k, layout, dtype=dtype, pad=8, offset=8, bias=bias, alpha=0.75, beta=-1.5)
    assert rep.ok, rep


def test_split_k_is_one_launch_and_leaves_no_partial_in_the_output():
    cfg = DenseGemmConfig(16, 64, 128, 1, 4, 3, 0, 4)
    a = torch.randn(3, 1024).bfloat16()
    b = torch.randn(64, 1024).bfloat16().t()
    out = torch.full((3, 64), float("nan"), dtype=torch.bfloat16)
    assert config_fits(cfg, checked_problem(a, b, out)) is None
    rep = run_emulated(cfg, a, b, out)
    assert [launch.grid for launch in rep.launches] == [(4, 1, 1)]  # 1 tile x 4 splits; the last arriver reduces
    ref = reference(a, b, None, 1.0, 1.0)
    assert (out.double() - ref).abs().max() <= 2**-8 * ref.abs().max()
