"""AOTInductor packages and ``cpp_wrapper`` with FlyDSL GEMM winners, on a real gfx950.

The CPU tier (test/inductor/test_aoti_export.py) proves the codegen and runs the kernels in
the emulator; here the same steps run on the device (``AOTI_STEPS_DEVICE=cuda``, the device
executor): a Linear with bias and a small MoE block (router, two ``torch._grouped_mm``) are
packaged with ``aoti_compile_and_package`` under max-autotune with FLYDSL among the backends,
loaded in a fresh process, and must run the FlyDSL kernels there and match eager.
"""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.gfx950

_spec = importlib.util.spec_from_file_location(
    "aoti_export_steps", Path(__file__).parent.parent / "inductor" / "test_aoti_export.py")
steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steps)

DEVICE = {"TORCH_FLYDSL_EXECUTOR": "device", "AOTI_STEPS_DEVICE": "cuda", "TORCH_FLYDSL_INTREE_POLICY": "plugin"}


@pytest.mark.parametrize("timings", ["forced", "real"])
def test_package_built_and_loaded_on_the_device_matches_eager(tmp_path, timings):
    env = {**DEVICE, **({"AOTI_STEPS_TIMINGS": "real"} if timings == "real" else {})}
    built = steps.step("build", tmp_path, env)
    calls = steps.proxy_calls(built["package"])
    if timings == "forced":  # with real timings, whichever choice is fastest on the device wins
        assert [c.split("(")[0] for c in calls if c.startswith("torch_flydsl::")] == [
            "torch_flydsl::dense_addmm_out", "torch_flydsl::grouped_mm_out", "torch_flydsl::grouped_mm_out"], calls
    loaded = steps.step("load", tmp_path, env)
    assert loaded["flydsl_warnings"] == [], loaded  # no PyTorch fallback in the loaded package
    assert len(loaded["served"]) == sum(c.startswith("torch_flydsl::") for c in calls), (loaded, calls)
    assert loaded["max_rel_err"] < steps.BF16_TOLERANCE, loaded


def test_cpp_wrapper_compile_on_the_device_calls_the_ops_and_matches_eager(tmp_path):
    steps.step("build", tmp_path, DEVICE)  # writes the eager output the step compares with
    r = steps.step("cpp_wrapper", tmp_path, DEVICE)
    assert "torch_flydsl::grouped_mm_out" in r["code"] or "torch_flydsl.grouped_mm_out" in r["code"]
    assert r["max_rel_err"] < steps.BF16_TOLERANCE, r


@pytest.mark.skipif(not steps.e8m0_in_cpp_wrappers(), reason="this torch's C++ wrappers have no E8M0 dtype (MX is "
                    "declined under cpp_wrapper/AOTI there)")
def test_mx_scaled_mm_package_on_the_device(tmp_path):
    steps.step("mx_build", tmp_path, DEVICE)
    r = steps.step("mx_load", tmp_path, DEVICE)
    assert r["flydsl_warnings"] == [] and r["served"] == ["scaled_mm_out"], r
    assert r["max_rel_err"] < 1e-2, r
