"""Eager RMSNorm (``torch_flydsl.eager`` + the rmsnorm family): ``F.rms_norm`` reaches
``aten::_fused_rms_norm``, which the family serves when eligible, PyTorch's kernel otherwise;
autograd stays PyTorch's. Each case runs in a fresh process (overrides are registered at import
for the keys the process's executor allows: CPU only under the emulator / stand-in)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from torch_flydsl.runtime.intree import install_status

SCRIPT = textwrap.dedent("""
    import json, logging, torch, torch.nn.functional as F
    import torch_flydsl
    from torch_flydsl import eager
    from torch_flydsl.templates.rmsnorm import reference
    notes = []
    class Rec(logging.Handler):
        def emit(self, r): notes.append(r.getMessage())
    logging.getLogger("torch_flydsl").addHandler(Rec(logging.DEBUG))
    out = {"registered": sorted(map(list, eager._registered)), "enabled": torch_flydsl.eager_enabled()}
    g = torch.Generator().manual_seed(0)
    def err(y, x, w, eps):
        ry, _ = reference(x, w, eps)
        return ((y.double() - ry).abs() / (ry.abs() + 1e-2)).max().item()
""")


def run(body: str, env: dict, timeout=600):
    code = SCRIPT + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "TORCH_FLYDSL_LOG": "debug", **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "stderr": r.stderr}


EMULATOR = {"TORCH_FLYDSL_EXECUTOR": "emulator"}
STANDIN = {"TORCH_FLYDSL_EXECUTOR": "reference-standin"}
INTREE_SERVES = install_status("eager").usable  # torch 2.15 with flydsl 0.3.x: its override has rms_norm


@pytest.mark.emulator
def test_bf16_4097_is_served_by_the_emulated_kernel_and_disabled_gives_pytorchs():
    r = run("""
        x = torch.randn(8, 4097, generator=g).to(torch.bfloat16); w = torch.randn(4097, generator=g).to(torch.bfloat16)
        y = F.rms_norm(x, (4097,), w, 1e-6)
        out["err"] = err(y, x, w, 1e-6); out["served"] = notes[-1]
        with torch_flydsl.disabled():
            out["enabled_inside"] = torch_flydsl.eager_enabled()
            y2 = F.rms_norm(x, (4097,), w, 1e-6)
        out["disabled"] = notes[-1]
        out["pytorch_err"] = err(y2, x, w, 1e-6)
    """, EMULATOR)
    assert ["_fused_rms_norm", "CPU"] in r["registered"] and r["enabled"] and not r["enabled_inside"]
    assert r["served"] == "aten._fused_rms_norm: FlyDSL rms_w4_r1_s4"
    assert r["err"] <= 2**-7
    assert r["disabled"] == "aten._fused_rms_norm: PyTorch's kernel: torch_flydsl.disabled()"
    assert r["pytorch_err"] <= 2**-7


@pytest.mark.emulator
def test_gradients_through_the_kernel_match_pytorchs_formula():
    # _fused_rms_norm's autograd formula saves our rstd; PyTorch's backward reads it.
    r = run("""
        x = torch.randn(5, 300, generator=g); w = torch.randn(300, generator=g)
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = F.rms_norm(xs, (300,), ws, 1e-6)
        out["served"] = notes[-1]; out["grad_fn"] = type(y.grad_fn).__name__
        gy = torch.randn(5, 300, generator=g)
        y.backward(gy)
        xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
        yd = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6) * wd  # float64 math, autograd
        yd.backward(gy.double())
        out["dx"] = (xs.grad.double() - xd.grad).abs().max().item() / xd.grad.abs().max().item()
        out["dw"] = (ws.grad.double() - wd.grad).abs().max().item() / wd.grad.abs().max().item()
    """, EMULATOR)
    assert r["served"].startswith("aten._fused_rms_norm: FlyDSL ")
    assert r["grad_fn"] == "FusedRmsNormBackward0"
    assert r["dx"] < 1e-5 and r["dw"] < 1e-5, r


@pytest.mark.skipif(INTREE_SERVES, reason="torch's in-tree FlyDSL override serves rms_norm here (coexistence test below)")
def test_declines_say_why_and_keep_pytorchs_result():
    r = run("""
        x = torch.randn(4, 64, generator=g)
        w64 = torch.randn(64, dtype=torch.float64, generator=g)
        calls = [lambda: F.rms_norm(x.double(), (64,)), lambda: F.rms_norm(x.t().contiguous().t(), (64,)),
                 lambda: F.rms_norm(x.view(2, 2, 64), (2, 64)), lambda: F.rms_norm(x, (64,), w64)]
        ys = [c() for c in calls]
        out["notes"] = list(notes)
        with torch_flydsl.disabled():
            out["same_as_pytorch"] = [torch.equal(y, c()) for y, c in zip(ys, calls)]
        y = F.rms_norm(x, (64,)); out["served"] = notes[-1]; out["err"] = err(y, x, None, None)
    """, STANDIN)
    notes = "\n".join(r["notes"])
    assert "input dtype float64 is not bfloat16, float16 or float32" in notes
    assert "input strides (1, 4) are not contiguous" in notes
    assert "only one normalized (last) dimension" in notes
    assert "weight dtype float64 differs from the input's float32" in notes
    assert r["same_as_pytorch"] == [True] * 4  # PyTorch's own kernel answered the declined calls
    # The stand-in (named so: a float64 reference standing in for the kernel) serves the rest.
    assert r["served"] == "aten._fused_rms_norm: FlyDSL rms_w1_r4_s1" and r["err"] < 1e-6


@pytest.mark.skipif(INTREE_SERVES, reason="torch's in-tree FlyDSL override serves rms_norm here")
def test_eps_none_is_the_fp32_epsilon_as_pytorch_computes_it():
    r = run("""
        x = (torch.randn(4, 64, generator=g) * 1e-3).to(torch.bfloat16)
        with torch_flydsl.disabled():
            theirs = F.rms_norm(x, (64,))
        ours = F.rms_norm(x, (64,))
        out["same"] = torch.equal(theirs, ours); out["served"] = notes[-1]
        out["err"] = err(theirs, x, None, torch.finfo(torch.float32).eps)
        out["err_dtype_eps"] = err(theirs, x, None, torch.finfo(torch.bfloat16).eps)
    """, STANDIN)
    assert r["served"].startswith("aten._fused_rms_norm: FlyDSL")
    assert r["err"] < 2**-7 < r["err_dtype_eps"]  # PyTorch uses fp32's epsilon, not bf16's
    assert r["same"]


def test_eager_switch_off_at_start_up_registers_nothing():
    r = run("""
        x = torch.randn(4, 64, generator=g); F.rms_norm(x, (64,))
        out["notes"] = notes
    """, {**STANDIN, "TORCH_FLYDSL_EAGER": "0"})
    assert r["registered"] == [] and r["enabled"] is False
    assert not any("_fused_rms_norm" in n for n in r["notes"])


@pytest.mark.skipif(INTREE_SERVES, reason="torch's in-tree FlyDSL override serves rms_norm here")
def test_torch_compile_traces_through_the_override_and_matches(tmp_path):
    # Fake tensors never reach the override (they stop at the Python key); Inductor lowers
    # rms_norm itself, so the compiled graph matches PyTorch and logs no eager call.
    r = run("""
        x = torch.randn(6, 96, generator=g, requires_grad=True); w = torch.randn(96, generator=g, requires_grad=True)
        fn = torch.compile(lambda a, b: F.rms_norm(a, (96,), b, 1e-6))
        y = fn(x, w); y.sum().backward()
        out["err"] = err(y.detach(), x, w, 1e-6)
        out["gx"] = x.grad is not None and bool(torch.isfinite(x.grad).all())
        out["eager_calls"] = [n for n in notes if n.startswith("aten._fused_rms_norm:")]
    """, {**STANDIN, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert r["err"] < 1e-5 and r["gx"]
    assert r["eager_calls"] == []


@pytest.mark.skipif(not INTREE_SERVES, reason="needs torch's in-tree FlyDSL eager override (torch 2.15 + flydsl 0.3.x)")
def test_defers_to_torchs_intree_override_instead_of_registering_twice():
    r = run("""
        out["notes"] = notes
    """, STANDIN)
    assert ["_fused_rms_norm", "CPU"] not in r["registered"]
    # Said at start-up (inside ``import torch``) on the TORCH_FLYDSL_LOG=debug stderr handler.
    assert "aten._fused_rms_norm on CPU: not overridden: torch's in-tree FlyDSL backend serves rms_norm" in r["stderr"]
