"""FlyDSL choices in Inductor's max-autotune for mm/addmm, end to end on CPU.

No AMD GPU exists here, so these tests run kernels through TORCH_FLYDSL_EXECUTOR=
``reference-standin`` (a float64 reference standing in for the kernel: plumbing only) and
force FlyDSL's timings to win. What they check is the glue: which choices are offered, what
generated code calls, results, and cache keys. Each compile runs in a fresh process
(``compile_probe.py``) because the FX-graph and autotune caches act across processes.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from expecttest import assert_expected_inline

PROBE = Path(__file__).with_name("compile_probe.py")


def compile_in_subprocess(cache_dir, env=None, **opts):
    # These tests are about the plugin's own glue: where torch ships an in-tree FlyDSL backend
    # that would serve mm (torch 2.15 with flydsl 0.3.x), the plugin is asked to offer its
    # choices too. Deferral itself is tested in test_coexistence_glue.py.
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCH_FLYDSL_INTREE_POLICY": "plugin",
                **(env or {})}
    r = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(opts)], capture_output=True, text=True, env=full_env, timeout=600
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


STANDIN = {"TORCH_FLYDSL_EXECUTOR": "reference-standin"}


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "inductor_cache"


def test_mm_winner_is_a_call_to_the_plugin_op(cache):
    r = compile_in_subprocess(cache, STANDIN, op="mm", force_win=True)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.dense_mm_out.default(arg0_1, arg1_1, cfg='m128n128k32_w2x2_s4_g0', out=buf0)""",
    )
    assert r["benchmarked"] == ["FlyDSL m128n128k32_w2x2_s4_g0"]
    assert r["max_rel_err"] < 1e-2


def test_addmm_passes_expanded_bias_alpha_and_beta(cache):
    r = compile_in_subprocess(cache, STANDIN, op="addmm", force_win=True)
    assert_expected_inline(
        "\n".join(r["calls"]),
        """torch.ops.torch_flydsl.dense_addmm_out.default(reinterpret_tensor(arg0_1, (64, 128), (0, 1), 0), arg1_1, arg2_1, cfg='m128n128k32_w2x2_s4_g0', alpha=0.5, beta=2.0, out=buf0)""",
    )
    assert r["max_rel_err"] < 1e-2


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_linear_every_layout_gets_a_flydsl_choice(cache, layout):
    r = compile_in_subprocess(cache, STANDIN, op="linear", layout=layout, force_win=True)
    assert len(r["calls"]) == 1 and "torch_flydsl.dense_addmm_out" in r["calls"][0]
    assert r["max_rel_err"] < 1e-2


def test_curated_breadth_offers_every_fitting_config(cache):
    from torch_flydsl.templates.dense_gemm.config import config_fits, search_space
    from torch_flydsl.templates.dense_gemm.problem import GemmProblem
    import torch

    env = {**STANDIN, "TORCH_FLYDSL_AUTOTUNE": "1"}
    r = compile_in_subprocess(cache, env, op="mm", shape=[64, 128, 256], force_win=True)
    problem = GemmProblem(64, 128, 256, torch.bfloat16)
    fitting = [f"FlyDSL {c.key()}" for c in search_space("curated") if config_fits(c, problem) is None]
    assert sorted(r["benchmarked"]) == sorted(fitting) and len(fitting) > 1


@pytest.mark.emulator
def test_emulator_executor_runs_the_compiled_gfx950_kernel_end_to_end(cache):
    # The whole path on a CPU: choice -> generated code -> custom op -> FlyDSL kernel compiled
    # for gfx950 -> executed by the emulator (races/OOB fail the op) -> checked vs float64.
    env = {"TORCH_FLYDSL_EXECUTOR": "emulator"}
    r = compile_in_subprocess(cache, env, op="linear", layout="nt", shape=[96, 160, 128], force_win=True)
    assert len(r["calls"]) == 1 and "torch_flydsl.dense_addmm_out" in r["calls"][0]
    assert r["max_rel_err"] < 1e-2


def test_a_bad_knob_value_warns_and_keeps_its_default_instead_of_failing_the_compile(cache):
    r = compile_in_subprocess(cache, {**STANDIN, "TORCH_FLYDSL_AUTOTUNE": "sometimes"}, op="mm", force_win=True)
    assert r["benchmarked"] == ["FlyDSL m128n128k32_w2x2_s4_g0"]  # the default: one baseline config
    assert any("TORCH_FLYDSL_AUTOTUNE='sometimes'" in m for m in r["flydsl_log"]), r["flydsl_log"]


def test_unsupported_dtype_keeps_pytorch_path(cache):
    r = compile_in_subprocess(cache, STANDIN, op="mm", dtype="float32", force_win=True)
    assert r["calls"] == ["extern_kernels.mm(arg0_1, arg1_1, out=buf0)"]
    assert r["benchmarked"] == []


@pytest.mark.emulator
def test_a_failing_config_loses_instead_of_failing_the_compile(cache):
    # Real autotuning on CPU: the emulator executor makes every FlyDSL choice a gfx950 kernel
    # that is compiled and run when benchmarked. One config's kernel raises while benchmarked
    # (an EmulatorError, as when the emulator finds a race): choices.isolate_failures must drop
    # that config and say so on the torch_flydsl logger, the others must still be benchmarked,
    # and the compile must succeed with a correct result. (Inductor's autotuner would also
    # swallow a RuntimeError, silently; the log line is what proves our guard handled it.)
    # Three small configs keep the emulation to seconds.
    configs = ["m16n64k128_w1x4_s3_g0", "m32n64k128_w2x2_s3_g0", "m64n64k64_w2x2_s4_g0"]
    failing = configs[1]
    env = {"TORCH_FLYDSL_EXECUTOR": "emulator", "TORCH_FLYDSL_AUTOTUNE": "1"}
    r = compile_in_subprocess(cache, env, op="mm", shape=[16, 32, 128], only_configs=configs, fail_config=failing)
    assert sorted(r["benchmarked"]) == sorted(f"FlyDSL {c}" for c in configs)
    dropped = [m for m in r["flydsl_log"] if "dropped" in m]
    assert dropped == [f"FlyDSL config {failing} dropped: PlantedKernelFault: planted failure of {failing}"]
    assert len(r["calls"]) == 1 and failing not in r["calls"][0]
    assert r["max_rel_err"] < 1e-2


def _normalized(code: str) -> str:
    # Drop lines naming per-run temp paths; everything else must match byte for byte.
    return "\n".join(ln for ln in code.splitlines() if not re.search(r"/tmp|torchinductor_|# kernel path", ln))


@pytest.mark.parametrize(
    "label, env, backends",
    [
        ("FLYDSL absent from the backend list", STANDIN, "ATEN"),
        ("no gfx950 device (device executor on a CPU)", {"TORCH_FLYDSL_EXECUTOR": "device"}, "ATEN,FLYDSL"),
    ],
)
def test_generated_code_is_identical_to_a_run_without_the_plugin(tmp_path, label, env, backends):
    opts = dict(op="linear", layout="nt", backends=backends, fixed_aten_timings=True)
    without = compile_in_subprocess(tmp_path / "a", {"TORCH_FLYDSL_DISABLE": "1"}, **opts)
    with_plugin = compile_in_subprocess(tmp_path / "b", env, **opts)
    assert with_plugin["benchmarked"] == []
    assert _normalized(with_plugin["code"]) == _normalized(without["code"]), label


def test_warm_fx_graph_cache_in_a_fresh_process_runs_the_plugin_op(cache):
    cold = compile_in_subprocess(cache, STANDIN, op="mm", force_win=True)
    warm = compile_in_subprocess(cache, STANDIN, op="mm", force_win=True)
    assert (cold["fx_misses"], warm["fx_hits"]) == (1, 1)
    assert warm["benchmarked"] == []  # nothing re-lowered
    assert warm["calls"] == cold["calls"] and "torch_flydsl" in warm["calls"][0]
    assert warm["max_rel_err"] < 1e-2


def test_changing_a_plugin_knob_misses_the_fx_graph_cache(cache):
    compile_in_subprocess(cache, {**STANDIN, "TORCH_FLYDSL_AUTOTUNE": "0"}, op="mm", force_win=True)
    wider = compile_in_subprocess(cache, {**STANDIN, "TORCH_FLYDSL_AUTOTUNE": "1"}, op="mm", force_win=True)
    assert wider["fx_misses"] == 1 and len(wider["benchmarked"]) > 1


def test_version_bump_invalidates_fx_graph_and_autotune_caches(cache):
    compile_in_subprocess(cache, STANDIN, op="mm", force_win=True)
    bumped = compile_in_subprocess(cache, STANDIN, op="mm", force_win=True, bump_version=True)
    # A stale FX hit would skip lowering; a stale autotune hit would skip benchmarking.
    assert bumped["fx_misses"] == 1
    assert bumped["benchmarked"] == ["FlyDSL m128n128k32_w2x2_s4_g0"]
