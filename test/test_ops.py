"""The plugin's custom ops, called directly as generated code calls them."""

import logging

import pytest
import torch

import torch_flydsl
from torch_flydsl import ops
from torch_flydsl.runtime.launch_guard import LaunchRefused

torch_flydsl.enable()
CFG = "m128n128k64_w2x2_s2_g0"


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
def test_a_compile_failure_inside_the_op_gives_pytorchs_result_logged_once(monkeypatch, caplog):
    # Regression: with a warm cache and a broken toolchain the compiled call raised. Here the
    # kernel cannot compile (no ld.lld anywhere); the op must still return PyTorch's result.
    from torch_flydsl.runtime import compile as rc

    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setattr(rc, "find_lld", lambda: None)
    monkeypatch.setattr(ops, "_warned", set())
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


OPCHECK_CASES = {
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
    torch.library.opcheck(ops.op(name), args, kwargs)


def test_while_autotuning_times_a_choice_a_fallback_raises_instead(monkeypatch):
    # Otherwise a config that cannot run would be timed at PyTorch's speed under our name and
    # could win autotuning (then every call would silently run PyTorch).
    monkeypatch.delenv("TORCH_FLYDSL_EXECUTOR", raising=False)  # device executor: no gfx950 here
    a, b, out = operands()
    with ops.strict(), pytest.raises(ops.KernelNotRun, match="will not launch"):
        ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)
    ops.op("dense_mm_out")(a, b, cfg=CFG, out=out)  # outside autotuning: PyTorch's result
    assert torch.equal(out, torch.mm(a, b))
