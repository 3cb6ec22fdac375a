"""The plugin's custom ops, called directly as generated code calls them."""

import logging

import pytest
import torch

import torch_flydsl
from torch_flydsl import ops
from torch_flydsl.runtime.launch_guard import LaunchRefused

torch_flydsl.enable()
CFG = "m128n128k32_w2x2_s4_g0"


def operands(m=64, n=128, k=128, offset=0):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m * k + offset, dtype=torch.bfloat16, generator=g)[offset:].view(m, k)
    b = torch.randn(k, n, dtype=torch.bfloat16, generator=g)
    return a, b, torch.empty(m, n, dtype=torch.bfloat16)


def test_operands_the_kernel_cannot_take_get_pytorchs_result_and_one_warning(monkeypatch, caplog):
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    a, b, out = operands(offset=1)  # A's origin is 2 bytes past a 16-byte boundary
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)
        ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)
    assert torch.equal(out, torch.mm(a, b))
    assert caplog.text.count("PyTorch computes them") == 1 and "not on a 16-byte boundary" in caplog.text


def test_device_executor_without_gfx950_gives_pytorchs_result_never_a_launch(monkeypatch, caplog):
    # A cached graph calling our op on a machine that cannot launch (no HIP here): the launch
    # guard refuses (a FlyDSL launch without HIP would abort the process) and PyTorch computes.
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)
    from torch_flydsl.templates.dense_gemm import launcher

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("launched without gfx950"))
    # The reason is logged once per (config, reason) per process: an earlier test in this worker
    # may have logged it already.
    monkeypatch.setattr(ops, "_warned", set())
    a, b, out = operands()
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)
    assert torch.equal(out, torch.mm(a, b))
    assert "will not launch a FlyDSL kernel" in caplog.text


def test_launch_guard_itself_refuses_without_gfx950(monkeypatch):
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)
    from torch_flydsl.runtime.launch_guard import executor_for

    with pytest.raises(LaunchRefused, match="will not launch"):
        executor_for(torch.device("cpu"))


@pytest.mark.emulator  # the compile goes through the emulator executor's path
def test_a_compile_failure_inside_the_op_gives_pytorchs_result_logged_once(monkeypatch, caplog, tmp_path):
    # Regression: with a warm cache and a broken toolchain the compiled call raised. Here the
    # kernel cannot compile (no ld.lld anywhere); the op must still return PyTorch's result.
    from torch_flydsl.runtime import compile as rc
    from torch_flydsl.runtime import isolated

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    # Where the compile runs (a compile worker) there must be no linker either: both look on
    # PATH and under ROCM_PATH, which the worker gets from this process with each compile.
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("ROCM_PATH", str(empty))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(rc, "find_lld", lambda: None)
    monkeypatch.setattr(ops, "_warned", set())
    isolated.forget()  # a kernel compiled by an earlier test of this process would be found
    a, b, out = operands(m=40, n=136)
    bias = torch.randn(136, dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        for _ in range(2):
            out.fill_(float("nan"))
            ops.op("dense_addmm_out")(bias, a, b, alpha=0.5, beta=2.0, cfg=CFG, out=out)
            assert torch.equal(out, torch.addmm(bias.expand(40, 136), a, b, alpha=0.5, beta=2.0))
    assert caplog.text.count("PyTorch computes them") == 1 and "no ld.lld found" in caplog.text


@pytest.mark.emulator
def test_emulator_executor_runs_the_gfx950_kernel(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    a, b, out = operands(m=72, n=136)
    bias = torch.randn(136, dtype=torch.bfloat16)
    ops.op("dense_addmm_out")(bias, a, b, alpha=0.5, beta=2.0, cfg=CFG, out=out)
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * bias.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


MX_CFG = "mx_m128n128k128_w2x2_s2_g0"


def mx_operands(m=64, n=128, k=256, bias=False, scale_rows=None):
    """Finite MXFP8 operands in torch._scaled_mm's layout, E8M0 scales (``scale_rows`` rows:
    default M / N), output and optional bias."""
    from torch_flydsl.templates.scaled_gemm.problem import SCALE_DTYPE

    g = torch.Generator().manual_seed(0)

    def e4m3(rows):
        c = torch.randint(0, 256, (rows, k), generator=g, dtype=torch.uint8)
        c[(c & 0x7F) == 0x7F] ^= 1  # NaN codes -> finite
        return c.view(torch.float8_e4m3fn)

    def e8m0(rows):
        return torch.randint(120, 135, (rows, k // 32), generator=g, dtype=torch.uint8).view(SCALE_DTYPE)

    a, b = e4m3(m), e4m3(n).t()
    sa, sb = e8m0(scale_rows or m), e8m0(scale_rows or n)
    c = torch.randn(n, generator=g).to(torch.bfloat16) if bias else None
    return a, b, sa, sb, c, torch.empty(m, n, dtype=torch.bfloat16)


def grouped_operands(sizes=(5, 0, 27), n=64, k=64):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(sum(sizes), k, generator=g).to(torch.bfloat16)
    b = torch.randn(len(sizes), n, k, generator=g).to(torch.bfloat16).transpose(1, 2)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    return a, b, offs, torch.empty(sum(sizes), n, dtype=torch.bfloat16)


GRP_CFG = "grp_m32n128k64_w1x4_s3_g0"

OPCHECK_CASES = {
    "grouped_mm_out": lambda: (grouped_operands()[:3], {"cfg": GRP_CFG, "out": grouped_operands()[3]}),
    "scaled_mm_out": lambda: (mx_operands(bias=True)[:5], {"cfg": MX_CFG, "out": mx_operands()[5]}),
    "aten_scaled_mm_out": lambda: (mx_operands()[:4], {"out": mx_operands()[5]}),
    "dense_mm_out": lambda: ((*operands()[:2],), {"cfg": CFG, "out": operands()[2]}),
    "dense_addmm_out": lambda: (
        (torch.randn(128, dtype=torch.bfloat16), *operands()[:2]),
        {"alpha": 0.5, "beta": 2.0, "cfg": CFG, "out": operands()[2]},
    ),
}


@pytest.mark.parametrize("name", sorted(ops.custom_ops()))
def test_opcheck_every_custom_op(monkeypatch, name):
    # Schema, fake-tensor (Meta) kernel, autograd registration and functionalization of the op
    # as generated code calls it. The reference stand-in computes (plumbing only), so this
    # runs without a toolchain.
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    assert set(OPCHECK_CASES) == set(ops.custom_ops())  # a new op needs a case here
    args, kwargs = OPCHECK_CASES[name]()
    utils = torch.library._OPCHECK_DEFAULT_UTILS
    if any(isinstance(t, torch.Tensor) and t.dtype.itemsize == 1 and t.dtype.is_floating_point for t in args):
        # SchemaCheckMode compares every inner op's inputs with arithmetic that CPU PyTorch
        # lacks for float8 ("mul_cpu_reduced_float" not implemented): the rest still run.
        utils = tuple(u for u in utils if u != "test_schema")
    torch.library.opcheck(ops.op(name), args, kwargs, test_utils=utils)


def test_while_autotuning_times_a_choice_a_fallback_raises_instead(monkeypatch):
    # Otherwise a config that cannot run would be timed at PyTorch's speed under our name and
    # could win autotuning (then every call would silently run PyTorch).
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)  # device executor: no gfx950 here
    a, b, out = operands()
    with ops.strict(), pytest.raises(ops.KernelNotRun, match="will not launch"):
        ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)
    ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)  # outside autotuning: PyTorch's result
    assert torch.equal(out, torch.mm(a, b))


def test_scaled_mm_operands_the_kernel_cannot_take_get_the_exact_product_and_one_warning(monkeypatch, caplog):
    # K=96 is a whole number of 32-blocks but not of the MFMA's 128: declined at run time
    # (a cached graph fed other shapes). CPU PyTorch has no MX GEMM: the exact dequantized
    # product stands in for PyTorch's result there.
    from torch_flydsl.templates.scaled_gemm import reference

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    monkeypatch.setattr(ops, "_warned", set())
    a, b, sa, sb, _, out = mx_operands(k=96)
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        ops.op("scaled_mm_out")(a, b, sa, sb, cfg=MX_CFG, out=out)
        ops.op("scaled_mm_out")(a, b, sa, sb, cfg=MX_CFG, out=out)
    assert torch.equal(out, reference(a, b, sa, sb).to(torch.bfloat16))
    assert caplog.text.count("PyTorch computes them") == 1 and "not a multiple of 128" in caplog.text


def test_scaled_mm_with_a_dense_config_key_falls_back_instead_of_misreading_it(monkeypatch, caplog):
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    monkeypatch.setattr(ops, "_warned", set())
    a, b, sa, sb, _, out = mx_operands()
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        ops.op("scaled_mm_out")(a, b, sa, sb, cfg=CFG, out=out)
    assert "PyTorch computes them" in caplog.text and CFG in caplog.text


@pytest.mark.emulator
def test_emulator_executor_runs_the_gfx950_scaled_kernel_with_padded_scale_rows(monkeypatch):
    # v1 torch._scaled_mm asks for round_up(M, 128) scale rows: the rows past M are never read.
    from torch_flydsl.templates.scaled_gemm import reference

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    a, b, sa, sb, bias, out = mx_operands(m=40, n=72, bias=True, scale_rows=128)
    sa[40:] = torch.full_like(sa[40:].view(torch.uint8), 0xFF).view(sa.dtype)  # NaN if ever read
    ops.op("scaled_mm_out")(a, b, sa, sb, bias, cfg=MX_CFG, out=out)
    ref = reference(a, b, sa, sb, bias)
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_grouped_mm_operands_the_kernel_cannot_take_get_pytorchs_result(monkeypatch, caplog):
    # K=40 is not a multiple of the config's block_k (64): PyTorch's _grouped_mm computes it.
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    monkeypatch.setattr(ops, "_warned", set())
    a, b, offs, out = grouped_operands(k=40)
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        ops.op("grouped_mm_out")(a, b, offs, cfg=GRP_CFG, out=out)
    assert torch.equal(out, torch._grouped_mm(a, b, offs=offs))
    assert "PyTorch computes them" in caplog.text and "not a multiple of block_k" in caplog.text


@pytest.mark.emulator
def test_emulator_executor_runs_the_gfx950_grouped_kernel(monkeypatch):
    from torch_flydsl.templates.grouped_gemm import reference

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    a, b, offs, out = grouped_operands(sizes=(3, 0, 40, 9))
    ops.op("grouped_mm_out")(a, b, offs, cfg=GRP_CFG, out=out)
    ref = reference(a, b, offs)
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2
