"""Eager ``torch.topk`` through the TopK family's overrides of ``aten::topk`` and
``aten::topk.values`` (``torch_flydsl.eager``). Each case runs in a fresh process: overrides are
registered at import for the keys this process's executor allows (CPU under the emulator or the
stand-in). ``reference-standin`` cases check plumbing only (the family's exact reference stands
in for the kernel, so they run on every torch); ``emulator`` cases run the gfx950 kernel."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, logging, torch
    import torch_flydsl
    from torch_flydsl import eager
    from torch_flydsl.templates.topk.reference import reference
    notes = []
    class Rec(logging.Handler):
        def emit(self, r): notes.append(r.getMessage())
    logging.getLogger("torch_flydsl").addHandler(Rec(logging.DEBUG))
    g = torch.Generator().manual_seed(0)
    out = {"registered": sorted(map(list, eager._registered))}
    def served(fn):
        del notes[:]
        r = fn()
        return r, [n for n in notes if n.startswith("aten.topk")]
    def same(r, ref):
        return torch.equal(r[0], ref[0]) and torch.equal(r[1], ref[1])
""")


def run(executor, body, timeout=900, **extra_env):
    code = SCRIPT + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = {**os.environ, "TORCH_FLYDSL_LOG": "debug", "TORCH_FLYDSL_EXECUTOR": executor, **extra_env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.emulator
def test_done_when_64x4096_fp32_k8_is_served_by_flydsl_and_by_pytorch_when_disabled():
    r = run("emulator", """
        x = torch.randn(64, 4096, generator=g)
        ref = reference(x, 8)
        res, n1 = served(lambda: torch.topk(x, 8))
        out["flydsl"] = {"notes": n1, "exact": same(res, ref), "type": type(res).__name__}
        with torch_flydsl.disabled():
            res2, n2 = served(lambda: torch.topk(x, 8))
        out["disabled"] = {"notes": n2, "exact": same(res2, ref)}
    """)
    assert ["topk", "CPU"] in r["registered"] and ["topk.values", "CPU"] in r["registered"]
    assert r["flydsl"] == {"notes": ["aten.topk: FlyDSL topk_t128_kp8_reg"], "exact": True, "type": "topk"}
    assert r["disabled"]["exact"] and not any("FlyDSL" in n for n in r["disabled"]["notes"])


@pytest.mark.emulator
def test_out_variant_smallest_unsorted_and_bf16_run_the_kernel():
    r = run("emulator", """
        x = torch.randn(3, 500, generator=g).bfloat16()
        v, i = torch.empty(0, dtype=torch.bfloat16), torch.empty(0, dtype=torch.int64)
        res, n1 = served(lambda: torch.topk(x, 5, largest=False, out=(v, i)))
        rv, ri = reference(x, 5, largest=False)
        out["out"] = {"notes": n1, "same_objects": res[0] is v and res[1] is i, "exact": same((v, i), (rv, ri))}
        res, n2 = served(lambda: torch.topk(x, 7, sorted=False))
        rv, _ = reference(x, 7)
        out["unsorted"] = {"notes": n2, "values": torch.equal(res.values.sort(-1).values, rv.sort(-1).values),
                           "points": torch.equal(x.gather(-1, res.indices), res.values)}
    """)
    assert r["out"] == {"notes": ["aten.topk.values: FlyDSL topk_t128_kp8_reg"], "same_objects": True, "exact": True}
    assert r["unsorted"] == {"notes": ["aten.topk: FlyDSL topk_t128_kp8_reg"], "values": True, "points": True}


def test_standin_plumbing_and_declines_with_reasons():
    # INTREE_POLICY=plugin: the plugin's overrides even where torch 2.15's in-tree TopK would serve.
    r = run("reference-standin", """
        x = torch.randn(4, 100, generator=g)
        res, n = served(lambda: torch.topk(x, 3, dim=1))
        out["plain"] = {"notes": n, "exact": same(res, reference(x, 3))}
        res, n = served(lambda: torch.topk(x.t(), 3, dim=0))  # unit-stride dim 0: served in place
        out["dim0"] = {"notes": n, "shape": list(res.values.shape), "exact": same(res, reference(x.t(), 3, dim=0))}
        cases = {"long": (torch.randn(2, 40000, generator=g), 4, -1), "int": (torch.arange(10).view(2, 5), 2, -1),
                 "bigk": (torch.randn(2, 3000, generator=g), 1100, -1), "strided": (torch.randn(50, 4, generator=g), 3, 0),
                 "double": (torch.randn(3, 9, dtype=torch.float64, generator=g), 2, -1)}
        for name, (t, k, d) in cases.items():
            with torch_flydsl.disabled():
                want = torch.topk(t, k, d)
            got, n = served(lambda: torch.topk(t, k, d))
            out[name] = {"notes": n, "exact": same(got, want)}
        with torch_flydsl.disabled():
            res, n = served(lambda: torch.topk(x, 3))
        out["disabled"] = n
    """, TORCH_FLYDSL_INTREE_POLICY="plugin")
    assert r["plain"] == {"notes": ["aten.topk: FlyDSL topk_t128_kp4_reg"], "exact": True}
    assert r["dim0"]["notes"] == ["aten.topk: FlyDSL topk_t128_kp4_reg"] and r["dim0"]["shape"] == [3, 4]
    assert r["dim0"]["exact"]
    why = {"long": "[size] 40000 elements along dim 1: the kernel takes rows of at most 32768",
           "int": "[dtype] int64 input: the kernel takes float32, float16 and bfloat16",
           "bigk": "[size] k=1100: the kernel sorts at most 1024 survivors in LDS",
           "strided": "[layout] dim 0 has stride 4: the kernel reads rows of unit stride and a transposing copy "
                      "would cost more than it saves",
           "double": "[dtype] float64 input: the kernel takes float32, float16 and bfloat16"}
    for name, reason in why.items():
        assert r[name] == {"notes": [f"aten.topk: PyTorch's kernel: {reason}"], "exact": True}, name
    assert r["disabled"] == ["aten.topk: PyTorch's kernel: torch_flydsl.disabled()"]


@pytest.mark.emulator
def test_torch_compile_traces_with_fake_tensors_and_runs():
    """Inductor lowers topk to an extern call of aten.topk (torch 2.11-2.15, CPU and CUDA alike:
    docs/support.md), so the compiled graph's topk is served by the override too."""
    r = run("emulator", """
        import torch._dynamo
        from torch._inductor.utils import run_and_get_code
        x = torch.randn(2, 300, generator=g)
        f = torch.compile(lambda t: torch.topk(t * 2, 4, largest=False), backend="inductor", fullgraph=True)
        (res, code), seen = served(lambda: run_and_get_code(f, x))
        rv, ri = reference(x * 2, 4, largest=False)
        out["compiled"] = same(res, (rv, ri))
        out["extern"] = any("torch.ops.aten.topk" in c for c in code)
        out["served"] = seen
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            fv, fi = torch.topk(torch.empty(3, 50), 5)
            out["fake"] = [list(fv.shape), str(fi.dtype)]
    """)
    assert r["compiled"] is True
    assert r["extern"] is True and r["served"] == ["aten.topk: FlyDSL topk_t128_kp4_reg"]
    assert r["fake"] == [[3, 5], "torch.int64"]


def test_no_override_where_torchs_in_tree_topk_serves():
    # torch 2.15 + flydsl 0.3.x: torch's own FlyDSL TopK override serves; ours is not registered
    # (the default defer policy). Elsewhere (2.11-2.14, or flydsl 0.4+) ours is.
    r = run("reference-standin", """
        from torch_flydsl import serving
        out["deferral"] = serving.deferral("topk", "cpu")
        x = torch.randn(2, 50, generator=g)
        res, n = served(lambda: torch.topk(x, 3))
        out["notes"] = n
    """)
    if r["deferral"]:
        assert "in-tree FlyDSL backend serves topk" in r["deferral"]
        assert not any(op in ("topk", "topk.values") for op, _ in r["registered"])
        assert r["notes"] == []
    else:
        assert ["topk", "CPU"] in r["registered"] and ["topk.values", "CPU"] in r["registered"]
        assert r["notes"] == ["aten.topk: FlyDSL topk_t128_kp4_reg"]
