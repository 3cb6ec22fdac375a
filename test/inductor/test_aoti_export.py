"""FlyDSL GEMM winners exported by AOTInductor and compiled under ``cpp_wrapper``, on CPU.

One model (a Linear with bias, then a small MoE block: router mm, top-2 routing, the experts'
two ``torch._grouped_mm``) is exported and packaged once per module with
``aoti_compile_and_package`` and ``max_autotune_gemm_backends="ATEN,TRITON,FLYDSL"``; FlyDSL is
forced to win, as the demo does (timings mean nothing on a CPU). The package's C++ must call
the plugin's ops through AOTI's proxy executor; loaded in a fresh process, the FlyDSL kernels
run in the gfx950 emulator (``TORCH_FLYDSL_EXECUTOR=emulator``) and must match eager within
bf16 tolerance. Without the plugin's ops, loading must fail with an error naming them. A
``cpp_wrapper`` ``torch.compile`` of the same model must call the ops and match too.

Every step runs in a fresh process: this file, run as a script (``STEPS`` below).
"""

import json
import logging
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Optional

import pytest
from expecttest import assert_expected_inline

pytestmark = pytest.mark.emulator

BACKENDS = "ATEN,TRITON,FLYDSL"
EMULATOR = {"TORCH_FLYDSL_EXECUTOR": "emulator", "TORCH_FLYDSL_INTREE_POLICY": "plugin"}
BF16_TOLERANCE = 2e-2  # max |out - eager| / max |eager|
DYNAMIC_ROWS = (1, 37, 200)  # batch sizes one package with a symbolic batch runs


def step(what: str, workdir: Path, env: dict) -> dict:
    """Run ``STEPS[what](workdir)`` in a fresh process; its JSON report (last stdout line)."""
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor_cache"), **env}
    r = subprocess.run([sys.executable, __file__, what, str(workdir)], capture_output=True, text=True,
                       env=full_env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def built_once(tmp_path_factory, name: str, what: str, env: Optional[dict] = None) -> tuple[Path, dict]:
    """``step(what)`` into this session's ``name`` directory, once even when xdist workers split
    the module's tests (they share their session's base temp; the first to come builds)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this session's, shared by its workers
    workdir, report = base / name, base / f"{name}.json"
    with FileLock(str(base / f"{name}.lock")):
        if not report.exists():
            workdir.mkdir(exist_ok=True)
            report.write_text(json.dumps(step(what, workdir, {**EMULATOR, **(env or {})})))
    return workdir, json.loads(report.read_text())


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return built_once(tmp_path_factory, "aoti_export", "build")


def proxy_calls(package_path: str) -> list[str]:
    """The package's proxy-executor calls in the order its C++ makes them, each as the extern
    node it runs (from the package's extern-node JSON): ``target(cfg)``."""
    with zipfile.ZipFile(package_path) as z:
        cpp = [z.read(n).decode() for n in z.namelist() if n.endswith("wrapper.cpp")]
        nodes = [json.loads(z.read(n))["nodes"] for n in z.namelist() if n.endswith("wrapper.json")]
    assert len(cpp) == 1 and len(nodes) == 1, "one AOTI model per package"
    calls = []
    for index in re.findall(r"aoti_torch_proxy_executor_call_function\(proxy_executor, (\d+),", cpp[0]):
        node = nodes[0][int(index)]["node"]
        cfg = next((i["arg"]["as_string"] for i in node["inputs"] if i["name"] == "cfg"), None)
        calls.append(f"{node['target']}({cfg})")
    return calls


def test_package_calls_the_flydsl_ops_through_the_proxy_executor(package):
    _, report = package
    assert_expected_inline(
        "\n".join(proxy_calls(report["package"])),
        """\
torch_flydsl::dense_addmm_out(m16n64k128_w1x4_s3_g0)
torch_flydsl::grouped_mm_out(grp_m32n128k64_w1x4_s3_g0)
torch_flydsl::grouped_mm_out(grp_m32n128k64_w1x4_s3_g0)""",
    )


def test_loaded_in_a_fresh_process_the_package_runs_the_kernels_and_matches_eager(package):
    workdir, _ = package
    r = step("load", workdir, EMULATOR)
    assert r["max_rel_err"] < BF16_TOLERANCE, r
    assert r["flydsl_warnings"] == [], r  # no PyTorch fallback: the kernels ran
    assert sorted(set(r["served"])) == ["dense_addmm_out", "grouped_mm_out"], r


def test_without_the_plugins_ops_loading_fails_naming_them(package):
    workdir, _ = package
    r = step("load_without_plugin", workdir, {"TORCH_FLYDSL_DISABLE": "1"})
    assert r["error_type"] == "RuntimeError", r
    assert "torch_flydsl::dense_addmm_out" in r["error"], r


@pytest.mark.slow  # the default tier checks cpp_wrapper offers (test_declines_logged); this runs a whole compile
def test_cpp_wrapper_compile_calls_the_flydsl_ops_and_matches_eager(package):
    # With the policy "defer" and torch's in-tree backend planted as serving every op: it offers
    # nothing under a C++ wrapper (torch 2.15), so the plugin must serve anyway.
    workdir, _ = package
    r = step("cpp_wrapper", workdir, {**EMULATOR, "TORCH_FLYDSL_INTREE_POLICY": "defer", "AOTI_STEPS_INTREE": "planted"})
    # torch 2.13+ call the dispatcher from C++; 2.11 calls back into Python for the op.
    called = sorted(set(re.findall(r"torch_flydsl(?:::|\.)(\w+_out)", r["code"])))
    assert called == ["dense_addmm_out", "grouped_mm_out"], called
    assert "findSchemaOrThrow" in r["code"] or "PyObject_CallObject" in r["code"]
    assert all(r["deferred"].values()), r["deferred"]  # the plant works: outside C++ wrappers, deferred
    assert r["max_rel_err"] < BF16_TOLERANCE, r


@pytest.fixture(scope="module", params=["scaled_mm", "scaled_mm_v2"])
def mx_package(request, tmp_path_factory):
    """v1 ``torch._scaled_mm``, or v2 ``F.scaled_mm`` through the plugin's lowering override."""
    import torch

    from torch_flydsl.runtime.probe import _parse_version

    if request.param == "scaled_mm_v2" and _parse_version(torch.__version__)[:2] < (2, 13):
        pytest.skip("torch < 2.13: Inductor falls back to eager _scaled_mm_v2 before any hook")
    workdir, report = built_once(tmp_path_factory, f"aoti_export_{request.param}", "mx_build",
                                 {"AOTI_STEPS_MX_OP": request.param})
    return request.param, workdir, report


def e8m0_in_cpp_wrappers() -> bool:
    from torch_flydsl.inductor.versions import cpp_wrapper_lacks_e8m0

    return cpp_wrapper_lacks_e8m0() is None


@pytest.mark.slow
@pytest.mark.skipif(not e8m0_in_cpp_wrappers(), reason="this torch's C++ wrappers have no E8M0 dtype: PyTorch "
                    "cannot compile MX scales there (the decline test below covers it)")
def test_mx_scaled_mm_package_calls_the_op_and_loaded_matches_the_reference(mx_package):
    op, workdir, report = mx_package
    calls = "\n".join(proxy_calls(report["package"]))
    if op == "scaled_mm":
        assert_expected_inline(calls, """torch_flydsl::scaled_mm_out(mx_m64n64k128_w2x2_s3_g0_c4)""")
    else:  # 128x128x256: PyTorch's own v2 choice (the plugin's aten_scaled_mm_out) lost
        assert_expected_inline(calls, """torch_flydsl::scaled_mm_out(mx_m32n64k256_w1x4_s3_g0_c2)""")
    r = step("mx_load", workdir, {**EMULATOR, "AOTI_STEPS_MX_OP": op})
    assert r["flydsl_warnings"] == [] and r["served"] == ["scaled_mm_out"], r
    assert r["max_rel_err"] < 1e-2, r


@pytest.mark.slow
def test_mx_scaled_mm_under_cpp_wrapper_calls_the_op_and_matches_the_reference(tmp_path):
    r = step("mx_cpp_wrapper", tmp_path, {**EMULATOR, "TORCH_FLYDSL_LOG": "info"})
    if not e8m0_in_cpp_wrappers():  # torch 2.11: declined with the reason; PyTorch's C++ fails anyway
        assert any("scaled_mm node" in n and "has no E8M0 dtype" in n for n in r["notes"]), r["notes"]
        assert "aoti_torch_dtype_float8_e8m0fnu" in r["error"], r["error"][-2000:]
        return
    assert "error" not in r, r["error"][-2000:]
    assert sorted(set(re.findall(r"torch_flydsl(?:::|\.)(\w+_out)", r["code"]))) == ["scaled_mm_out"]
    assert r["max_rel_err"] < 1e-2, r


@pytest.mark.slow
def test_a_batch_size_that_varies_is_served_by_one_package(tmp_path):
    built = step("dyn_build", tmp_path, EMULATOR)
    assert [c.split("(")[0] for c in proxy_calls(built["package"])] == ["torch_flydsl::dense_addmm_out"]
    r = step("dyn_load", tmp_path, EMULATOR)
    assert r["flydsl_warnings"] == [] and r["served"] == ["dense_addmm_out"] * len(DYNAMIC_ROWS), r
    assert max(r["max_rel_err"]) < BF16_TOLERANCE, r


# -- the steps, each in a fresh process -----------------------------------------------------


def make_model():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class TinyMoE(nn.Module):
        """Top-k routed experts through two ``torch._grouped_mm`` calls over expert-sorted rows."""

        def __init__(self, hidden, inter, experts, top_k):
            super().__init__()
            self.top_k, self.experts = top_k, experts
            self.router = nn.Linear(hidden, experts, bias=False)
            self.w13 = nn.Parameter(torch.randn(experts, 2 * inter, hidden) / hidden**0.5)
            self.w2 = nn.Parameter(torch.randn(experts, hidden, inter) / inter**0.5)

        def forward(self, x):
            top_w, top_e = self.router(x).float().softmax(-1).topk(self.top_k)
            expert_of_slot = top_e.flatten()
            slots = expert_of_slot.argsort(stable=True)  # each token's k slots, grouped by expert
            offs = F.one_hot(expert_of_slot, self.experts).sum(0).cumsum(0).to(torch.int32)
            gate, up = torch._grouped_mm(x[slots // self.top_k], self.w13.mT, offs=offs).chunk(2, -1)
            down = torch._grouped_mm(F.silu(gate) * up, self.w2.mT, offs=offs)
            weighted = down * top_w.flatten()[slots, None].to(down.dtype)
            # Back to token order, summed over each token's experts: a gather, not index_add_
            # (torch 2.13's AOTI passes index_add's default alpha, which the extern node it
            # serializes for the proxy executor leaves out: "Mismatch between ints consumed").
            return weighted[slots.argsort()].unflatten(0, (-1, self.top_k)).sum(1)

    class LinearThenMoE(nn.Module):
        def __init__(self, hidden=64):
            super().__init__()
            self.proj = nn.Linear(hidden, hidden, bias=True)
            self.moe = TinyMoE(hidden, hidden, experts=4, top_k=2)

        def forward(self, x):
            return self.moe(self.proj(x))

    torch.manual_seed(0)
    device = os.environ.get("AOTI_STEPS_DEVICE", "cpu")  # test/gfx950/test_aoti_device.py: cuda
    model = LinearThenMoE().to(device, torch.bfloat16).eval()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    return model, x


def force_flydsl_to_win():
    """Every FlyDSL choice reports itself fastest without running (as ``demo`` does): the glue
    wraps each FlyDSL caller's benchmark in ``isolate_failures``; here that sets it instead.
    ``AOTI_STEPS_TIMINGS=real`` (on a gfx950) leaves autotuning alone."""
    import importlib

    importlib.import_module("torch._inductor.lowering")  # installs the glue
    from torch_flydsl.inductor import choices

    if os.environ.get("AOTI_STEPS_TIMINGS") == "real":
        return
    choices.isolate_failures = lambda caller, label: setattr(caller, "benchmark", lambda *a, **k: 1e-9)


def rel_err(out, ref) -> float:
    return float(((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item())


def build(workdir: Path) -> dict:
    import torch

    import torch_flydsl

    torch_flydsl.enable()
    force_flydsl_to_win()
    model, x = make_model()
    with torch.no_grad():
        eager = model(x)
    torch.save({"x": x, "eager": eager}, workdir / "io.pt")
    exported = torch.export.export(model, (x,))
    path = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(workdir / "model.pt2"),
        inductor_configs={"max_autotune": True, "max_autotune_gemm_backends": BACKENDS})
    return {"package": path}


def plugin_warnings(level: int = logging.WARNING) -> list:
    """The torch_flydsl logger's warnings from now on (a PyTorch fallback of an op says one), or
    its lines of ``level`` and above (the logger passes on what ``TORCH_FLYDSL_LOG`` lets through)."""
    seen: list = []

    class Handler(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logging.getLogger("torch_flydsl").addHandler(Handler(level))
    return seen


def count_served() -> list:
    """The plugin ops run from now on, by name (their body, ``ops.run``, falls back to PyTorch
    with a warning when the kernel cannot run)."""
    from torch_flydsl import ops

    served: list = []
    run = ops.run

    def counted(family, custom_op, args, kwargs):
        run(family, custom_op, args, kwargs)
        served.append(custom_op)

    ops.run = counted
    return served


def load(workdir: Path) -> dict:
    import torch

    served = count_served()
    warnings = plugin_warnings()
    io = torch.load(workdir / "io.pt")
    model = torch._inductor.aoti_load_package(str(workdir / "model.pt2"))
    out = model(io["x"])
    return {"max_rel_err": rel_err(out, io["eager"]), "served": served, "flydsl_warnings": warnings}


def load_without_plugin(workdir: Path) -> dict:
    import torch

    try:
        torch._inductor.aoti_load_package(str(workdir / "model.pt2"))
    except Exception as e:
        return {"error_type": type(e).__name__, "error": str(e)}
    return {"error_type": None, "error": ""}


def cpp_wrapper(workdir: Path) -> dict:
    import torch
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code

    import torch_flydsl

    torch_flydsl.enable()
    force_flydsl_to_win()
    if os.environ.get("AOTI_STEPS_INTREE") == "planted":
        from torch_flydsl.runtime import intree

        gemm_ops = [op for op, kind in intree.INTREE_OPS.items() if kind == "inductor"]
        intree.serves = lambda op, *a, **k: f"in-tree serves {op} (planted stand-in)" if op in gemm_ops else None
    model, x = make_model()
    io = torch.load(workdir / "io.pt")
    assert torch.equal(x, io["x"])
    with torch.no_grad(), ic.patch(cpp_wrapper=True, max_autotune=True, max_autotune_gemm_backends=BACKENDS):
        out, code = run_and_get_code(torch.compile(model), x)
    from torch_flydsl.serving import deferral

    # What a Python-wrapper graph would do with each GEMM op here (None: not deferred).
    deferred = {op: deferral(op, "cpu", 0) for op in ("mm", "grouped_mm")}
    return {"max_rel_err": rel_err(out, io["eager"]), "code": "\n".join(code), "deferred": deferred}


def mx_case():
    """An MX-FP8 ``torch._scaled_mm`` with a bias, as the compile probe builds it (operands,
    E8M0 scales and the float64 reference): a module of no parameters over its inputs. The
    scales come in as uint8 and are viewed as E8M0 inside: AOTI's input checks have no E8M0
    (``KeyError: torch.float8_e8m0fnu`` in DTYPE_TO_ATEN on torch 2.11 and 2.13)."""
    import torch
    from compile_probe import scaled_case
    from torch_flydsl.templates.scaled_gemm.problem import SCALE_DTYPE

    op = os.environ.get("AOTI_STEPS_MX_OP", "scaled_mm")  # or "scaled_mm_v2": F.scaled_mm, torch 2.13+
    if op == "scaled_mm_v2" and torch.version.hip is None:
        torch.version.hip = "7.0.0"  # v2's meta checks ROCm's MX scale layout only on a ROCm build
    m, n = (40, 72) if op == "scaled_mm" else (128, 128)  # v2's ROCm meta: rows whole 128-row scale tiles
    fn, args, reference = scaled_case(op, m, n, 256, {"bias": True})
    a, b, sa, sb, bias = (t.to(os.environ.get("AOTI_STEPS_DEVICE", "cpu")) for t in args)

    class ScaledMM(torch.nn.Module):
        def forward(self, a, b, sa, sb, bias):
            return fn(a, b, sa.view(SCALE_DTYPE), sb.view(SCALE_DTYPE), bias)

    def reference_of_codes(a, b, sa, sb, bias):
        return reference(a, b, sa.view(SCALE_DTYPE), sb.view(SCALE_DTYPE), bias)

    return ScaledMM(), (a, b, sa.view(torch.uint8), sb.view(torch.uint8), bias), reference_of_codes


def pytorch_mx_untimed():
    """CPU PyTorch has no MX GEMM: its choice gets a fixed timing instead of failing to run."""
    from torch._inductor.select_algorithm import ExternKernelCaller

    if os.environ.get("AOTI_STEPS_DEVICE", "cpu") != "cpu":
        return
    ExternKernelCaller.benchmark = lambda self, *a, **k: 1.0


def mx_build(workdir: Path) -> dict:
    import torch

    import torch_flydsl

    torch_flydsl.enable()
    force_flydsl_to_win()
    pytorch_mx_untimed()
    model, args, reference = mx_case()
    torch.save({"args": args, "reference": reference(*args)}, workdir / "io.pt")
    path = torch._inductor.aoti_compile_and_package(
        torch.export.export(model, args), package_path=str(workdir / "model.pt2"),
        inductor_configs={"max_autotune": True, "max_autotune_gemm_backends": BACKENDS})
    return {"package": path}


def mx_load(workdir: Path) -> dict:
    import torch

    served = count_served()
    warnings = plugin_warnings()
    io = torch.load(workdir / "io.pt")
    out = torch._inductor.aoti_load_package(str(workdir / "model.pt2"))(*io["args"])
    return {"max_rel_err": rel_err(out, io["reference"]), "served": served, "flydsl_warnings": warnings}


def mx_cpp_wrapper(workdir: Path) -> dict:
    import torch
    import torch._inductor.config as ic
    from torch._inductor.utils import run_and_get_code

    import torch_flydsl

    torch_flydsl.enable()
    force_flydsl_to_win()
    pytorch_mx_untimed()
    model, args, reference = mx_case()
    notes = plugin_warnings(logging.INFO)
    try:
        with ic.patch(cpp_wrapper=True, max_autotune=True, max_autotune_gemm_backends=BACKENDS):
            out, code = run_and_get_code(torch.compile(model), *args)
    except Exception as e:  # torch 2.11: its C++ wrapper cannot hold E8M0 tensors
        return {"error": f"{type(e).__name__}: {e}", "notes": notes}
    return {"max_rel_err": rel_err(out, reference(*args)), "code": "\n".join(code), "notes": notes}


def dyn_linear():
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(256, 128).to(torch.bfloat16).eval()


def dyn_build(workdir: Path) -> dict:
    """A Linear exported with a symbolic batch (``torch.export.Dim``): one kernel for every M."""
    import torch

    import torch_flydsl

    torch_flydsl.enable()
    force_flydsl_to_win()
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    exported = torch.export.export(dyn_linear(), (x,), dynamic_shapes={"input": {0: torch.export.Dim("batch", max=4096)}})
    path = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(workdir / "model.pt2"),
        inductor_configs={"max_autotune": True, "max_autotune_gemm_backends": BACKENDS})
    return {"package": path}


def dyn_load(workdir: Path) -> dict:
    import torch

    served = count_served()
    warnings = plugin_warnings()
    runner, eager = torch._inductor.aoti_load_package(str(workdir / "model.pt2")), dyn_linear()
    errs = []
    with torch.no_grad():
        for m in DYNAMIC_ROWS:
            x = torch.randn(m, 256, dtype=torch.bfloat16)
            errs.append(rel_err(runner(x), eager(x)))
    return {"max_rel_err": errs, "served": served, "flydsl_warnings": warnings}


STEPS = {"build": build, "load": load, "load_without_plugin": load_without_plugin, "cpp_wrapper": cpp_wrapper,
         "mx_build": mx_build, "mx_load": mx_load, "mx_cpp_wrapper": mx_cpp_wrapper, "dyn_build": dyn_build,
         "dyn_load": dyn_load}

if __name__ == "__main__":
    print(json.dumps(STEPS[sys.argv[1]](Path(sys.argv[2]))))
