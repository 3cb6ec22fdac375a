"""``python -m torch_flydsl precompile`` and ``TORCH_FLYDSL_RUN_ONLY=1`` (issue 10's done-when):
a 10-shape spec compiles each kernel once with a progress bar, a second run compiles nothing,
and run-only mode declines with a reason on an empty cache and offers the configs on the
filled one without compiling."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_flydsl.deploy import manifest as mf
from torch_flydsl.deploy.spec import SHAPES_FORMAT

from deploykit import needs_disk_cache_keys  # noqa: E402

pytestmark = pytest.mark.compile

PROBE = Path(__file__).parent.parent / "inductor" / "compile_probe.py"

# Ten shapes of a small decoder (q/k/v/o, MLP up/down, lm-head slices) at decode and prefill
# sizes, with a bias, an fp16 one, a K tail and a K-major A: 10 shapes, fewer kernels.
SHAPES = [
    dict(m=16, n=4096, k=4096), dict(m=16, n=14336, k=4096), dict(m=16, n=4096, k=14336),
    dict(m=2048, n=4096, k=4096), dict(m=2048, n=14336, k=4096), dict(m=2048, n=4096, k=14336),
    dict(m=64, n=1024, k=4096, bias=True), dict(m=64, n=1024, k=4096, dtype="float16"),
    dict(m=300, n=512, k=4104), dict(m=128, n=256, k=512, layout="tn"),
]


def shapes_spec(path, breadth="baseline"):
    shapes = [{"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, **s} for s in SHAPES]
    path.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": breadth, "shapes": shapes}))
    return path


def cli(*args, env=None):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "torch_flydsl", *args], capture_output=True, text=True, env=full,
                          timeout=900)


def binaries(cache):
    return {str(p): p.stat().st_mtime_ns for p in (cache / "flydsl").rglob("*.pkl")}


@needs_disk_cache_keys
def test_ten_shapes_compile_each_kernel_once_then_nothing(tmp_path):
    spec, cache = shapes_spec(tmp_path / "spec.json"), tmp_path / "cache"
    first = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--jobs", "2")
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    man = mf.read(cache)
    # One kernel per (config, dtype, layout, bias, K tail): 10 shapes share fewer binaries.
    assert 1 < len(man.kernels) < len(SHAPES)
    assert all(man.holds(k) for k in man.kernels)
    assert sum(len(v.shapes) for v in man.kernels.values()) == len(SHAPES)
    assert f"{len(man.kernels)} compiled, 0 already in the cache, 0 failed" in first.stdout, first.stdout
    assert "precompile: 100%" in first.stderr  # tqdm's bar (stderr)
    assert len(binaries(cache)) == len(man.kernels)
    ids = "\n".join(man.kernels)
    assert "/float16/" in ids and "/bias1/" in ids and "/ktail1" in ids and "/tn/" in ids

    before = binaries(cache)
    second = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"0 compiled, {len(man.kernels)} already in the cache, 0 failed" in second.stdout, second.stdout
    assert binaries(cache) == before


@needs_disk_cache_keys
def test_a_dispatch_table_spec_builds_its_configs_and_lands_in_the_cache(tmp_path):
    from torch_flydsl import dispatch_table as dt

    table = {"format": dt.FORMAT, "version": 1, "arch": "gfx950", "entries": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, "m": [1, 16], "n": 4096, "k": 4096,
         "config": "m16n64k128_w1x4_s3_g0_sk4", "source": "hand"},
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, "m": [1, 16], "n": 2048, "k": 4096,
         "config": "m16n64k128_w1x4_s3_g0_sk4", "source": "hand"},
    ]}
    spec = tmp_path / "table.json"
    spec.write_text(json.dumps(table))
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(tmp_path / "c"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "1 kernel(s) for 2 shape(s): 1 compiled" in r.stdout, r.stdout
    assert dt.load(tmp_path / "c" / dt.FILE_NAME).entries == dt.load(spec).entries


@needs_disk_cache_keys
def test_a_dispatch_table_with_mxfp8_entries_precompiles_the_scaled_kernel(tmp_path):
    """What the vLLM MXFP8 re-route serves (``scaled_mm`` entries) is built from the same table."""
    from torch_flydsl import dispatch_table as dt

    table = {"format": dt.FORMAT, "version": 1, "arch": "gfx950", "entries": [
        {"op": "scaled_mm", "dtype": "mxfp8", "layout": "nt", "bias": False, "m": [1, 32], "n": 64, "k": 256,
         "config": "mx_m32n64k256_w1x2_s3_g0"},
        {"op": "scaled_mm", "dtype": "mxfp8", "layout": "nt", "bias": False, "m": [1, 32], "n": 128, "k": 256,
         "config": "mx_m32n64k256_w1x2_s3_g0"},
    ]}
    spec = tmp_path / "table.json"
    spec.write_text(json.dumps(table))
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(tmp_path / "c"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "1 kernel(s) for 2 shape(s): 1 compiled" in r.stdout, r.stdout
    ids = list(mf.read(tmp_path / "c").kernels)
    assert len(ids) == 1 and ids[0].startswith("scaled_gemm-") and "/e4m3.e4m3/bfloat16/bias0" in ids[0], ids


@needs_disk_cache_keys
def test_a_dispatch_table_with_moe_grouped_entries_precompiles_the_grouped_kernel(tmp_path):
    """What the vLLM MoE re-route serves (``grouped_mm`` entries: W13 and W2 of one MoE layer)."""
    from torch_flydsl import dispatch_table as dt

    table = {"format": dt.FORMAT, "version": 1, "arch": "gfx950", "entries": [
        {"op": "grouped_mm", "dtype": "bfloat16", "layout": "nt", "m": [1, 64], "n": n, "k": k, "groups": 4,
         "config": "grp_m32n128k64_w1x4_s3_g0"} for n, k in ((128, 128), (128, 64))]}
    spec = tmp_path / "table.json"
    spec.write_text(json.dumps(table))
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(tmp_path / "c"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "1 kernel(s) for 2 shape(s): 1 compiled" in r.stdout, r.stdout  # one binary serves both GEMMs
    ids = list(mf.read(tmp_path / "c").kernels)
    assert len(ids) == 1 and ids[0].startswith("grouped_gemm-") and "/bcol/2d3d" in ids[0], ids


def test_bad_specs_exit_2_with_the_reason(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "shapes": [{"op": "mm", "dtype": "int8",
                                                                                   "m": 1, "n": 1, "k": 1}]}))
    r = cli("precompile", "--spec", str(bad), "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 2 and "shapes[0]" in r.stdout and "dtype 'int8'" in r.stdout, r.stdout
    r = cli("precompile", "--spec", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read the spec" in r.stdout, r.stdout


def explain_json(cache, run_only=True):
    env = {"TORCH_FLYDSL_CACHE_DIR": str(cache), "TORCH_FLYDSL_RUN_ONLY": "1" if run_only else "0"}
    r = cli("explain", "mm", "2048", "4096", "4096", "--breadth", "baseline", "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@needs_disk_cache_keys
def test_run_only_declines_on_an_empty_cache_and_offers_from_a_filled_one(tmp_path):
    cache = tmp_path / "cache"
    empty = explain_json(cache)
    assert empty["offered"] == []
    reasons = [d for d in empty["declined"] if d["category"] == "run-only"]
    assert reasons and "lists no precompiled kernels" in reasons[0]["reason"], empty
    assert explain_json(cache, run_only=False)["offered"], "without run-only the config is offered"

    spec = shapes_spec(tmp_path / "spec.json")
    assert cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet").returncode == 0
    before = binaries(cache)
    filled = explain_json(cache)
    assert filled["offered"] == explain_json(cache, run_only=False)["offered"] != []
    assert binaries(cache) == before


@needs_disk_cache_keys
def test_run_only_declines_a_kernel_the_cache_lacks_and_a_foreign_toolchain(tmp_path):
    cache = tmp_path / "cache"
    spec = tmp_path / "one.json"
    spec.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "m": 2048, "n": 4096, "k": 4096, "bias": True}]}))
    assert cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet").returncode == 0
    d = explain_json(cache)  # no bias: another kernel than the one built
    assert d["offered"] == [] and "bias0" in d["declined"][-1]["reason"] and "is not in" in d["declined"][-1]["reason"]
    man = json.loads((cache / "manifest.json").read_text())
    man["toolchain"] = "0" * 64
    (cache / "manifest.json").write_text(json.dumps(man))
    env = {"TORCH_FLYDSL_CACHE_DIR": str(cache), "TORCH_FLYDSL_RUN_ONLY": "1"}
    r = cli("explain", "mm", "2048", "4096", "4096", "--bias", "--breadth", "baseline", "--json", env=env)
    d = json.loads(r.stdout)
    assert d["offered"] == [] and "another FlyDSL toolchain" in d["declined"][-1]["reason"], d


def probe(tmp_path, env):
    full = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            "TORCH_FLYDSL_EXECUTOR": "reference-standin", **env}
    r = subprocess.run([sys.executable, str(PROBE), json.dumps({"op": "mm", "force_win": True,
                                                                "shape": [64, 128, 256]})],
                       capture_output=True, text=True, env=full, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_disk_cache_keys
def test_inductor_under_run_only_offers_only_precompiled_kernels_plumbing_with_reference_standin(tmp_path):
    """Plumbing (the FlyDSL choice runs the float64 stand-in): which choices Inductor gets."""
    cache = tmp_path / "cache"
    env = {"TORCH_FLYDSL_RUN_ONLY": "1", "TORCH_FLYDSL_CACHE_DIR": str(cache)}
    empty = probe(tmp_path / "a", env)
    assert not any("torch_flydsl" in c for c in empty["calls"]), empty["calls"]
    spec = tmp_path / "probe.json"
    spec.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nn", "m": 64, "n": 128, "k": 256}]}))
    assert cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet").returncode == 0
    filled = probe(tmp_path / "b", env)
    assert any("torch_flydsl.dense_mm_out" in c for c in filled["calls"]), filled["calls"]


@needs_disk_cache_keys
def test_mx_and_grouped_shapes_precompile_and_run_only_offers_them(tmp_path):
    spec = tmp_path / "moe.json"
    spec.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "scaled_mm", "dtype": "mxfp8", "out_dtype": "bfloat16", "m": 256, "n": 4096, "k": 4096},
        {"op": "scaled_mm", "dtype": "mxfp4", "out_dtype": "bfloat16", "bias": True, "m": 256, "n": 4096, "k": 4096},
        {"op": "grouped_mm", "dtype": "bfloat16", "groups": 8, "b_major": "col", "m": 4096, "n": 1024, "k": 2048},
    ]}))
    cache = tmp_path / "cache"
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    assert r.returncode == 0 and "3 compiled" in r.stdout, r.stdout + r.stderr[-3000:]
    from torch_flydsl.templates.grouped_gemm.config import KERNEL_VERSION as GROUPED_V
    from torch_flydsl.templates.scaled_gemm.config import KERNEL_VERSION as SCALED_V

    man = mf.read(cache)
    ids = sorted(man.kernels)
    assert [i.split("/")[0] for i in ids] == [GROUPED_V, SCALED_V, SCALED_V], ids
    # Each has its code object for the native launcher too (MX and grouped as well as dense).
    assert [man.why_native_not_held(i) for i in ids] == [None] * 3
    assert "native: 3 of 3 kernel(s) have a code object" in r.stdout, r.stdout
    env = {"TORCH_FLYDSL_CACHE_DIR": str(cache), "TORCH_FLYDSL_RUN_ONLY": "1"}
    for args, offered in [(("scaled_mm", "256", "4096", "4096"), True),
                          (("scaled_mm", "256", "4096", "4096", "--dtype", "w4a8"), False),
                          (("grouped_mm", "4096", "1024", "2048", "--groups", "8"), True),
                          (("grouped_mm", "4096", "1024", "2048", "--groups", "8", "--b-major", "row"), False)]:
        r = cli("explain", *args, "--breadth", "baseline", "--json", env=env)
        d = json.loads(r.stdout)
        assert bool(d["offered"]) is offered, (args, d)
        if not offered:
            assert any(x["category"] == "run-only" for x in d["declined"]), d


@pytest.mark.parametrize("shape, says", [
    ({"op": "scaled_mm", "dtype": "fp8", "m": 1, "n": 1, "k": 32}, "dtype 'fp8'"),
    ({"op": "grouped_mm", "dtype": "bfloat16", "m": 1, "n": 1, "k": 8}, "groups must be"),
    ({"op": "grouped_mm", "dtype": "bfloat16", "groups": 2, "layout": "nt", "m": 1, "n": 1, "k": 8}, "unknown field"),
    ({"op": "conv", "m": 1, "n": 1, "k": 1}, "op 'conv'"),
])
def test_shape_fields_are_checked_per_op(tmp_path, shape, says):
    from torch_flydsl.deploy.spec import SpecError, load

    p = tmp_path / "s.json"
    p.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "shapes": [shape]}))
    with pytest.raises(SpecError, match=says):
        load(p)
