"""The vLLM re-route of unquantized linear layers (torch_flydsl.integrations.vllm.linear) against
two copies of the seam:

- ``vllm-0.33``: the real vLLM 0.33.0 (``import vllm.model_executor.layers.utils`` in this
  process, with ``VLLM_TARGET_DEVICE=cpu`` so vLLM registers its op on the CPU key). Needs the
  dedicated venv that ``scripts/vllm_hook_test.sh`` builds; skipped where vLLM is not installed.
  vLLM's impl imports ``vllm.platforms.rocm``, whose import asks a GPU for its arch: the fixture
  answers "no arch" for that one query, so every ``on_gfx*`` is False and vLLM's own impl ends in
  its ``F.linear`` branch, as on a ROCm GPU whose shape no skinny/AITER kernel takes.
- ``standin``: a stand-in ``vllm`` package written here (none of vLLM's code), registering an op
  of the same name, schema and dispatch key the same way (a ``Library("vllm", "FRAGMENT")``
  define + impl on ``current_platform.dispatch_key`` + a fake kernel), with an ``envs`` module
  that has ``environment_variables`` and ``compile_factors()``. It runs wherever vLLM is not
  installed (the main venv, CI), and is skipped where the real vLLM owns the ``vllm`` namespace.

CPU tensors: on vLLM's CPU platform the op's kernel lives on the CPU key, so that is the key the
hook overrides here (on ROCm it is CUDA; the hook reads the key from vLLM's platform and checks
it with the dispatcher). Tests that only check plumbing run the float64 reference stand-in
(``reference-standin`` in their names); the kernel's arithmetic is checked under the emulator.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import torch_flydsl_boot
from torch_flydsl import dispatch_table
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import cache_key, common, linear

from vllmkit import real_vllm as _real_vllm, traced, write_standin, write_table

REPO = Path(__file__).resolve().parents[2]
HOOK_FILE = linear.__file__.replace(".pyc", ".py")
CFG = "m32n64k128_w2x2_s3_g0"  # the baseline pick for M=32 N=64 K=128 (explain mm 32 64 128)
M, N, K = 32, 64, 128
TOLERANCE = 2e-2  # bf16 output vs float64: a right kernel lands far below, a wrong one far above

def _import_real_utils():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm.model_executor.layers.utils as utils

    real = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(gcnArchName="none")
    try:
        import vllm.platforms.rocm  # noqa: F401 - imported by vLLM's impl on its first call
    finally:
        torch.cuda.get_device_properties = real
    return utils


@pytest.fixture(scope="module", params=["vllm-0.33", "standin"])
def seam(request, tmp_path_factory):
    if request.param == "vllm-0.33":
        if not _real_vllm():
            pytest.skip("vLLM is not installed in this venv; scripts/vllm_hook_test.sh runs these against vLLM 0.33.0")
        from vllm import __version__

        assert __version__.startswith("0.33"), f"these tests read vLLM 0.33's seam; this is vLLM {__version__}"
        utils = _import_real_utils()
    else:
        if _real_vllm():
            pytest.skip("the real vLLM owns the vllm namespace in this process; the stand-in runs where it is absent")
        root = write_standin(tmp_path_factory.mktemp("standin"))
        sys.path.insert(0, str(root))
        import vllm  # the stand-in

        vllm._standin = True
        import vllm.model_executor.layers.utils as utils
    import vllm.envs as envs

    return types.SimpleNamespace(name=request.param, utils=utils, envs=envs, impl=utils.rocm_unquantized_gemm_impl,
                                 op=torch.ops.vllm.rocm_unquantized_gemm.default)


def table_file(path: Path, *entries) -> str:
    """A dispatch table naming (mm, bfloat16, N, K, CFG) for each (m, bias) of ``entries``."""
    return write_table(path, "mm", "bfloat16", N, K, CFG, entries)


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A clean slate: no re-route, the plugin's variables unset, the table re-read; undone after."""
    for name in ("TORCH_FLYDSL_VLLM", "TORCH_FLYDSL_DISPATCH_TABLE", "TORCH_FLYDSL_CACHE_DIR", "TORCH_FLYDSL_EXECUTOR",
                 "TORCH_FLYDSL_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch_flydsl_boot, "_warned", set())
    monkeypatch.setattr(common, "_said", set())
    monkeypatch.setattr(common, "install_error", None)
    hook._uninstall()
    dispatch_table.reload()
    yield monkeypatch
    hook._uninstall()
    monkeypatch.undo()
    dispatch_table.reload()


def reroute_on(env, tmp_path, executor: str, *entries):
    env.setenv("TORCH_FLYDSL_VLLM", "1")
    env.setenv("TORCH_FLYDSL_EXECUTOR", executor)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "table.json", *(entries or [(M, False)])))
    torch_flydsl_boot.vllm_register()
    assert hook.installed(), common.install_error


def operands(m=M, dtype=torch.bfloat16, bias=False, lead=None):
    g = torch.Generator().manual_seed(m)
    x = torch.randn(*(lead or (m,)), K, generator=g).to(dtype)
    w = torch.randn(N, K, generator=g).to(dtype)
    b = torch.randn(N, generator=g).to(dtype) if bias else None
    return x, w, b


def ours_ran(codes) -> bool:
    return any(c.co_filename == HOOK_FILE for c in codes)


def assert_vllm_served(seam, x, w, b):
    out, codes = traced(seam.op, x, w, b)
    assert seam.impl.__code__ in codes  # vLLM's own function object is what computed it
    assert torch.equal(out, seam.impl(x, w, b))  # bitwise vLLM's result
    return codes


def rel_err(out, x, w, b) -> float:
    ref = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    return float((out.double() - ref).abs().max() / ref.abs().max())


def emulated_runs(env) -> list:
    """The config keys of the dense kernels the emulator runs from now on (in this test)."""
    from torch_flydsl.templates.dense_gemm.family import FAMILY

    runs, real = [], FAMILY.run_emulated
    env.setattr(FAMILY, "run_emulated", lambda cfg, *a, **kw: runs.append(cfg.key()) or real(cfg, *a, **kw))
    return runs


# -- knob off: vLLM untouched ------------------------------------------------------------------


def test_knob_unset_the_dispatcher_calls_vllms_own_impl(seam, env, tmp_path):
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "t.json", (M, False)))
    env.setenv("TORCH_FLYDSL_EXECUTOR", "reference-standin")
    torch_flydsl_boot.vllm_register()
    torch_flydsl_boot.vllm_register()
    assert not hook.installed()
    codes = assert_vllm_served(seam, *operands())
    assert not ours_ran(codes)
    # the compile-cache key still follows the plugin (Inductor-lowered FLYDSL graphs need it)
    assert "TORCH_FLYDSL_VLLM=0" in seam.envs.compile_factors()[hook.FINGERPRINT_KEY]


# -- knob on, the table names the shape: our kernel ----------------------------------------------


@pytest.mark.emulator
def test_emulator_bf16_linear_of_a_table_shape_is_computed_by_the_flydsl_kernel(seam, env, tmp_path):
    reroute_on(env, tmp_path, "emulator", (M, False))
    runs = emulated_runs(env)
    x, w, _ = operands(lead=(2, M // 2))  # [2, 16, K]: vLLM's M is x.numel() // K
    out, codes = traced(seam.op, x, w, None)
    assert runs == [CFG] and ours_ran(codes) and seam.impl.__code__ not in codes
    assert out.shape == (2, M // 2, N) and out.dtype == torch.bfloat16
    assert rel_err(out.reshape(M, N), x.reshape(M, K), w, None) < TOLERANCE


@pytest.mark.emulator
def test_emulator_bf16_linear_with_bias_is_computed_by_the_flydsl_kernel(seam, env, tmp_path):
    reroute_on(env, tmp_path, "emulator", (M, True))
    runs = emulated_runs(env)
    x, w, b = operands(bias=True)
    out, codes = traced(seam.op, x, w, b)
    assert runs == [CFG] and seam.impl.__code__ not in codes
    assert out.shape == (M, N) and rel_err(out, x, w, b) < TOLERANCE


def test_reference_standin_plumbing_table_shape_goes_to_the_dense_custom_op(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False), (M, True))
    for bias in (False, True):
        x, w, b = operands(bias=bias)
        out, codes = traced(seam.op, x, w, b)
        assert ours_ran(codes) and seam.impl.__code__ not in codes
        # the stand-in's float64 result rounded once: not what vLLM's bf16 F.linear gives
        ref = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
        assert torch.equal(out, ref.to(torch.bfloat16))


# -- knob on, anything else: vLLM's impl, bitwise ------------------------------------------------


@pytest.mark.parametrize("case", ["shape not in the table", "fp32 input", "non-contiguous weight", "bias not in the table"])
def test_reference_standin_plumbing_misses_run_vllms_original_impl(seam, env, tmp_path, case):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    x, w, b = operands()
    if case == "shape not in the table":
        x, w, b = operands(m=M + 1)
    elif case == "fp32 input":
        x, w, b = operands(dtype=torch.float32)
    elif case == "non-contiguous weight":
        w = w.t().contiguous().t()  # same [N, K] values, column-major
        assert not w.is_contiguous()
    else:
        x, w, b = operands(bias=True)
    codes = assert_vllm_served(seam, x, w, b)
    assert ours_ran(codes)  # our wrapper looked, and handed the call to vLLM


def test_reference_standin_plumbing_a_malformed_table_leaves_every_call_to_vllm(seam, env, tmp_path, caplog):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "torch-flydsl-dispatch-table", "version": 1, "entries": [{"op": "mm"')
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", str(bad))
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        assert_vllm_served(seam, *operands())
        assert_vllm_served(seam, *operands())
    assert caplog.text.count(str(bad)) == 1 and "not JSON" in caplog.text


def test_reference_standin_plumbing_one_debug_line_per_shape_and_decision(seam, env, tmp_path, caplog):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    with caplog.at_level(logging.DEBUG, logger="torch_flydsl"):
        for _ in range(3):
            seam.op(*operands())
            seam.op(*operands(m=M + 1))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(hook.QUALNAME)]
    assert lines == [f"{hook.QUALNAME} M={M} N={N} K={K} bfloat16 bias=False: FlyDSL {CFG}",
                     f"{hook.QUALNAME} M={M + 1} N={N} K={K} bfloat16 bias=False: vLLM's kernel: "
                     "shape not in the dispatch table"]


# -- installing ----------------------------------------------------------------------------------


def test_reference_standin_plumbing_installing_twice_is_harmless(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    route = dict(linear._routes)
    torch_flydsl_boot.vllm_register()
    hook.install()
    common._guarded(linear._reroute, "again")  # as if the post-import hook fired a second time
    common._guarded(cache_key._register_fingerprint, "again")
    assert linear._routes == route and common.install_error is None
    x, w, b = operands()
    out, codes = traced(seam.op, x, w, b)
    assert sum(c.co_name == "rocm_unquantized_gemm_flydsl" for c in codes) == 1  # one wrapper, not stacked
    assert torch.equal(out, torch.nn.functional.linear(x.double(), w.double()).to(torch.bfloat16))
    hook._uninstall()
    assert_vllm_served(seam, x, w, b)  # destroying our library gives the key back to vLLM's kernel


DEFERRED = r"""
import os, sys, types, json
import torch
import torch_flydsl_boot
from torch_flydsl.integrations import vllm as hook
from torch_flydsl.integrations.vllm import common
if os.environ.get("STANDIN_ROOT"):
    sys.path.insert(0, os.environ["STANDIN_ROOT"])
    torch_flydsl_boot.vllm_register()  # what vLLM does before it builds a model
else:
    from vllm.plugins import load_general_plugins  # vLLM's own loader: VLLM_PLUGINS, entry points
    load_general_plugins()
before = "vllm.model_executor.layers.utils" in sys.modules
if os.environ.get("STANDIN_ROOT"):
    import vllm.model_executor.layers.utils
else:
    import vllm.model_executor.layers.utils
    real = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(gcnArchName="none")
    import vllm.platforms.rocm
    torch.cuda.get_device_properties = real
import vllm.envs
x = torch.randn(32, 128).bfloat16(); w = torch.randn(64, 128).bfloat16()
out = torch.ops.vllm.rocm_unquantized_gemm(x, w, None)
ref = torch.nn.functional.linear(x.double(), w.double()).bfloat16()
print(json.dumps({"before": before, "installed": hook.installed(), "error": common.install_error,
                  "ours": torch.equal(out, ref), "fp": hook.FINGERPRINT_KEY in vllm.envs.compile_factors()}))
"""


def test_reference_standin_plumbing_installed_before_vllm_imports_its_utils(seam, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FLYDSL_")}
    env.update(TORCH_FLYDSL_VLLM="1", TORCH_FLYDSL_EXECUTOR="reference-standin", VLLM_PLUGINS="torch_flydsl",
               VLLM_TARGET_DEVICE="cpu", TORCH_FLYDSL_DISPATCH_TABLE=table_file(tmp_path / "t.json", (M, False)))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])  # this tree
    if seam.name == "standin":
        env["STANDIN_ROOT"] = str(write_standin(tmp_path / "standin"))
    r = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "before": False, "installed": True, "error": None, "ours": True, "fp": True}, r.stderr[-4000:]


def test_a_bad_TORCH_FLYDSL_VLLM_value_warns_once_and_installs_nothing(env, caplog):
    env.setenv("TORCH_FLYDSL_VLLM", "perhaps")
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        torch_flydsl_boot.vllm_register()
        torch_flydsl_boot.vllm_register()
    said = [r.getMessage() for r in caplog.records if "TORCH_FLYDSL_VLLM=" in r.getMessage()]
    assert len(said) == 1 and "'perhaps'" in said[0] and said[0].endswith("using the default 0"), caplog.text
    assert not hook.armed("reroute") and not hook.installed()


# -- the compile-cache key -----------------------------------------------------------------------


def test_the_fingerprint_enters_vllms_compile_cache_key(seam, env, tmp_path):
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    factors = seam.envs.compile_factors()
    fp = factors[hook.FINGERPRINT_KEY]
    assert "torch_flydsl/" in fp and "flydsl/" in fp and "TORCH_FLYDSL_VLLM=1" in fp
    assert "routed-at-load=none" in fp  # the table names no MXFP8 weight: no layer routes at load
    # Entries read per call (another M, bias, config) keep the key, and vLLM's compiled graphs.
    # (A process reads its table once per setting: each edit below is a new file, as the next
    # served start would see it.)
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", table_file(tmp_path / "more.json", (M, False), (M + 1, True)))
    assert seam.envs.compile_factors()[hook.FINGERPRINT_KEY] == fp
    # A weight an MXFP8 layer routes on at load changes the traced graph: another key.
    table = json.loads((tmp_path / "more.json").read_text())
    table["entries"].append({"op": "scaled_mm", "dtype": "mxfp8", "m": 32, "n": 4096, "k": 4096,
                             "config": "mx_m32n64k256_w1x2_s3_g0"})
    (tmp_path / "mx.json").write_text(json.dumps(table))
    env.setenv("TORCH_FLYDSL_DISPATCH_TABLE", str(tmp_path / "mx.json"))
    fp2 = seam.envs.compile_factors()[hook.FINGERPRINT_KEY]
    assert fp2 != fp and "routed-at-load=sha256:" in fp2
    # Recording routes every MXFP8 layer through the plugin's op: another key.
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    assert seam.envs.compile_factors()[hook.FINGERPRINT_KEY] != fp2
    env.delenv("TORCH_FLYDSL_RECORD_SHAPES")
    assert seam.envs.compile_factors()[hook.FINGERPRINT_KEY] == fp2
    # A knob that changes generated code: another key.
    env.setenv("TORCH_FLYDSL_AUTOTUNE", "exhaustive")
    assert seam.envs.compile_factors()[hook.FINGERPRINT_KEY] != fp2
    if seam.name == "vllm-0.33":
        from vllm.config.utils import hash_factors

        before = hash_factors(seam.envs.compile_factors())
        env.setenv("TORCH_FLYDSL_AUTOTUNE", "curated")
        assert hash_factors(seam.envs.compile_factors()) != before  # vLLM's own env hash moves
    hook._uninstall()
    assert hook.FINGERPRINT_KEY not in seam.envs.compile_factors()


def test_reference_standin_plumbing_record_shapes_notes_every_linear_call_hit_or_miss(seam, env, tmp_path):
    """TORCH_FLYDSL_RECORD_SHAPES: vLLM's linear calls are recorded (to build a precompile spec
    and a table from a real run), a table miss included; vLLM still serves the miss."""
    from torch_flydsl.deploy import record
    from torch_flydsl.deploy.spec import Shape

    env.setattr(record, "_process", None)
    env.setenv("TORCH_FLYDSL_RECORD_SHAPES", str(tmp_path / "shapes.json"))
    reroute_on(env, tmp_path, "reference-standin", (M, False))
    seam.op(*operands(lead=(2, M // 2)))  # a hit: [2, M/2, K] -> M rows
    assert_vllm_served(seam, *operands(m=M + 3, bias=True))  # a miss
    assert record._process.shapes == {Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=M, n=N, k=K): 1,
                                      Shape.of("mm", dtype="bfloat16", layout="nt", bias=True, m=M + 3, n=N, k=K): 1}
    record._process.shapes.clear()  # nothing for the at-exit save of this test process
