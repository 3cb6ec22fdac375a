"""A bad value in any TORCH_FLYDSL_* variable (config.KNOBS): the process runs, the result is
PyTorch's, and exactly one warning names the variable, repeats the value and says which
default is used instead; the plugin then behaves as with that default.

model.py compiled cold in a fresh process. Two processes cover the five variables: one with a
bad TORCH_FLYDSL_EXECUTOR (whose default, ``device``, takes FlyDSL off CPU tensors, so it
would hide the knobs read later), one with bad values of the four others at once (their
defaults do not interact). There the op runs the float64 stand-in (``reference-standin``): a
FlyDSL choice must be planned for the knobs to be read at all, and nothing needs emulating.
"""

from __future__ import annotations

import re
import sys

import pytest

import faultkit as fk
from torch_flydsl.config import KNOBS

# variable -> (bad value, the default as the warning says it)
BAD = {
    "TORCH_FLYDSL_DISABLE": ("maybe", "0"),
    "TORCH_FLYDSL_AUTOTUNE": ("sometimes", "'0'"),
    "TORCH_FLYDSL_INTREE_POLICY": ("sometimes", "'defer'"),
    "TORCH_FLYDSL_EXECUTOR": ("gpu", "'device'"),
    "TORCH_FLYDSL_LOG": ("verbose", "'(unset)'"),
    "TORCH_FLYDSL_EAGER": ("perhaps", "1"),
    "TORCH_FLYDSL_RUN_ONLY": ("perhaps", "0"),
    "TORCH_FLYDSL_NATIVE": ("sometimes", "'auto'"),  # read at import torch (ops.register)
}
# Knobs the compiled model never reads (paths used by deployment tools and the vLLM re-route):
# their bad values are tested where they are read, by these tests.
BAD_ELSEWHERE = {
    "TORCH_FLYDSL_DISPATCH_TABLE": "test_dispatch_table::test_a_broken_table_file_warns_once_and_dispatches_nothing",
    "TORCH_FLYDSL_CACHE_DIR": "test_deploy_knobs::test_an_unusable_cache_dir_warns_once_and_compiles_in_memory",
    "TORCH_FLYDSL_RECORD_SHAPES": "test_deploy_knobs::test_an_unwritable_record_file_warns_at_exit_and_the_run_succeeds",
    "TORCH_FLYDSL_RECORD_WINNERS": "test_winners::test_an_unwritable_winners_file_warns_at_exit_and_the_compile_succeeds",
    "TORCH_FLYDSL_COMPILE_TIMEOUT": "runtime/test_compile_isolation::test_a_bad_TORCH_FLYDSL_COMPILE_TIMEOUT_warns_once_and_uses_600_seconds",
    "TORCH_FLYDSL_VLLM": "integrations/test_vllm_hook::test_a_bad_TORCH_FLYDSL_VLLM_value_warns_once_and_installs_nothing",
    "TORCH_FLYDSL_VLLM_MXFP4":
        "integrations/test_vllm_mxfp4_linear::test_a_bad_TORCH_FLYDSL_VLLM_MXFP4_value_warns_once_and_keeps_vllms_kernel",
    "TORCH_FLYDSL_HIP_LIBRARY":
        "native/test_native_launcher::test_a_hip_library_that_does_not_load_is_named_in_the_status",
}
ALONE = "TORCH_FLYDSL_EXECUTOR"


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict:
    """The two finished children (run once per session), keyed by variable."""

    def build(base):
        together = {name: raw for name, (raw, _) in BAD.items() if name != ALONE}
        many = fk.run_model(base / "many" / "inductor", base / "many",
                            {"TORCH_FLYDSL_EXECUTOR": "reference-standin", **together}, force_win=True)
        alone = fk.run_model(base / "alone" / "inductor", base / "alone", {ALONE: BAD[ALONE][0]}, force_win=True)
        return {"many": fk.run_to_json(many), "alone": fk.run_to_json(alone)}

    done = fk.once(tmp_path_factory, "faults_knobs", build)
    many, alone = fk.run_from_json(done["many"]), fk.run_from_json(done["alone"])
    return {name: alone if name == ALONE else many for name in BAD}


def test_every_knob_has_a_bad_value_scenario():
    assert sorted([*BAD, *BAD_ELSEWHERE]) == sorted(k.env for k in KNOBS)


@pytest.mark.parametrize("name", sorted(BAD_ELSEWHERE))
def test_knobs_tested_elsewhere_name_a_test_that_exists(name):
    import importlib.util
    from pathlib import Path

    module, test = BAD_ELSEWHERE[name].split("::")
    path = Path(__file__).parents[1] / ("" if "/" in module else "deploy") / f"{module}.py"  # test/deploy unless named
    module = module.replace("/", "_")
    spec = importlib.util.spec_from_file_location(f"_knob_{module}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # its directory's helpers (vllmkit, deploykit), as pytest's rootdir import gives
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    assert callable(getattr(mod, test, None)), f"{path} has no {test}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_knob_value_warns_once_naming_the_variable_and_the_default(runs, name):
    raw, default = BAD[name]
    r = runs[name].ok()
    said = r.lines(f"{name}={raw!r}")
    assert len(said) == 1, r.stderr[-3000:]
    assert re.search(rf"using the default {re.escape(default)}$", said[0]), said[0]


def test_and_the_defaults_are_what_the_plugin_does(runs):
    many = runs["TORCH_FLYDSL_DISABLE"].ok()
    assert many.result["plugin"]  # DISABLE default 0: the plugin is on
    # AUTOTUNE default 0: the one baseline config; INTREE_POLICY default defer: offered,
    # as there is no in-tree backend in this torch
    assert many.flydsl_called and f"cfg='{fk.BASELINE_CFG}'" in many.result["calls"][0]
    assert many.lines("[torch_flydsl]") == []  # LOG default: the logger is not configured
    alone = runs[ALONE].ok()
    assert alone.result["plugin"] and not alone.flydsl_called  # EXECUTOR default device: none on CPU
