"""Who serves each op when torch ships its own FlyDSL backend (torch 2.15+): the plugin defers
an op only where the in-tree backend would really serve it, and serves everything else.

The in-tree gate is exercised through its two halves (``runtime.intree``): a fake install
status stands for "torch 2.15 with flydsl 0.3.x" or "... with flydsl 0.5"; the version matrix
(scripts/test_torch_versions.sh) runs the same decisions against the real torch 2.15.
"""

import pytest

from torch_flydsl import serving
from torch_flydsl.explain import explain_mm
from torch_flydsl.runtime import intree

ON = intree.IntreeStatus(True, True, "flydsl 0.3.4.1 passes its 0.3.x gate")
OFF = intree.IntreeStatus(True, False, "it accepts flydsl 0.3.x only, this is flydsl 0.5.0")
ABSENT = intree.IntreeStatus(False, False, "this torch has no in-tree FlyDSL backend")


@pytest.fixture
def intree_is(monkeypatch):
    def set_status(st):
        monkeypatch.setattr(intree, "install_status", lambda kind="inductor": st)

    return set_status


@pytest.mark.parametrize(
    "status, policy, expected",
    [
        (ON, "defer", {"mm": "in-tree", "addmm": "plugin", "grouped_mm": "in-tree", "topk": "in-tree"}),
        (ON, "plugin", {"mm": "plugin", "addmm": "plugin", "grouped_mm": "plugin", "topk": "plugin"}),
        (OFF, "defer", {"mm": "plugin", "addmm": "plugin", "grouped_mm": "plugin", "topk": "plugin"}),
        (ABSENT, "defer", {"mm": "plugin", "addmm": "plugin", "grouped_mm": "plugin", "topk": "plugin"}),
    ],
    ids=["in-tree on, defer", "in-tree on, plugin policy", "in-tree off (flydsl 0.5)", "no in-tree backend"],
)
def test_who_serves_each_op_on_a_gfx950(intree_is, monkeypatch, status, policy, expected):
    intree_is(status)
    monkeypatch.setenv("TORCH_FLYDSL_INTREE_POLICY", policy)
    got = {op: serving.who_serves(op, assume_gfx950=True).served_by for op in expected}
    assert got == expected


def test_in_tree_backend_needs_a_rocm_gfx950_device_even_when_its_gate_passes(intree_is, monkeypatch):
    intree_is(ON)
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "device")
    st = intree.status("cuda", 0)  # this machine: no ROCm build
    assert not st.usable and "not a ROCm build" in st.reason
    assert serving.deferral("mm", "cuda", 0) is None


def test_under_the_emulator_the_cpu_stands_for_gfx950_for_both_backends(intree_is, monkeypatch):
    intree_is(ON)
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    assert "in-tree FlyDSL backend serves mm" in serving.deferral("mm", "cpu", 0)
    assert serving.deferral("addmm", "cpu", 0) is None


def test_explain_json_reports_the_plugin_when_the_in_tree_backend_is_off(intree_is):
    intree_is(OFF)
    j = explain_mm(64, 4096, 4096, layout="nt").to_json()
    assert j["served_by"] == "plugin" and j["offered"] and "0.5.0" in j["reason"]


def test_explain_json_reports_in_tree_and_offers_nothing_when_it_serves_mm(intree_is):
    intree_is(ON)
    j = explain_mm(64, 4096, 4096, layout="nt").to_json()
    assert j["served_by"] == "in-tree" and j["offered"] == []
    assert j["declined"] == [{"config": None, "category": "coexistence", "reason": serving.deferral("mm", assume_gfx950=True)}]
    # addmm has no in-tree path: the plugin serves it.
    assert explain_mm(64, 4096, 4096, layout="nt", bias=True).to_json()["served_by"] == "plugin"


def test_the_real_install_status_matches_this_torch():
    import importlib.util

    import torch

    from torch_flydsl.runtime.probe import _parse_version, flydsl_info

    st = intree.install_status()
    assert st.present == (importlib.util.find_spec("torch._inductor.codegen.flydsl") is not None)
    assert st.present == (_parse_version(torch.__version__)[:2] >= (2, 15))
    if st.present:  # torch 2.15 pins flydsl 0.3.x
        assert st.usable == (_parse_version(flydsl_info().version)[:2] == (0, 3)), st
    else:
        assert not st.usable


def test_the_pinned_release_is_read_from_the_in_tree_gate_without_importing_it(monkeypatch, tmp_path):
    gate = tmp_path / "flydsl_utils.py"
    gate.write_text("_FLYDSL_SUPPORTED_RELEASE: tuple[int, int] = (0, 4)\n")
    monkeypatch.setattr(intree, "torch_file", lambda rel: gate)
    assert intree._supported_release() == (0, 4)
    monkeypatch.setattr(intree, "torch_file", lambda rel: None)
    assert intree._supported_release() == intree.DOCUMENTED_RELEASE


def test_on_a_rocm_build_eager_ops_defer_only_to_overrides_torch_really_registered(intree_is, monkeypatch):
    # torch 2.15 registers its FlyDSL RMSNorm on aten::_fused_rms_norm, TopK on aten::topk.
    intree_is(ON)
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "device")
    monkeypatch.setattr(intree, "device_reason", lambda *a, **k: None)  # as if on a ROCm gfx950
    monkeypatch.setattr(intree, "_rocm_build", lambda: True)
    monkeypatch.setattr(intree, "_registered_eager_ops", lambda: {"_fused_rms_norm"})
    assert intree.serves("rms_norm", "cuda", 0) is not None
    assert intree.serves("topk", "cuda", 0) is None
