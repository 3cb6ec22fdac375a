"""``python -m torch_flydsl explain topk ROWS N K``: the TopK family's answer as if on gfx950."""

import json

import pytest

from torch_flydsl.__main__ import main


@pytest.fixture(autouse=True)
def plugin_policy(monkeypatch):
    # The plugin's answer even where torch 2.15's in-tree TopK would serve (flydsl 0.3.x).
    monkeypatch.setenv("TORCH_FLYDSL_INTREE_POLICY", "plugin")


def explain_json(capsys, *args):
    assert main(["explain", "topk", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_topk_offers_the_config_the_eager_path_uses(capsys):
    r = explain_json(capsys, "64", "4096", "8")
    assert r["op"] == "topk" and r["offered"] == ["topk_t128_kp8_reg"]
    assert r["problem"]["rows"] == 64 and r["problem"]["n"] == 4096 and r["problem"]["k"] == 8
    assert r["problem"]["dtype"] == "float32" and r["problem"]["largest"] is True
    assert r["algorithm"] == "register" and r["algorithm_reason"].startswith("k=8 <= 16: a wave per row")


def test_explain_topk_names_the_radix_kernel_above_k_16_and_what_deterministic_mode_changes(capsys):
    import torch

    r = explain_json(capsys, "64", "4096", "17")
    assert r["offered"] == ["topk_t256_kp32"] and r["algorithm"] == "radix"
    assert r["algorithm_reason"].startswith("k=17 > 16: the register kernel keeps at most 16 candidates per lane")
    assert "lane-strided" in r["ties"] and r["problem"]["deterministic"] is False
    torch.use_deterministic_algorithms(True)
    try:
        r = explain_json(capsys, "64", "4096", "17")
        reg = explain_json(capsys, "64", "4096", "16")
    finally:
        torch.use_deterministic_algorithms(False)
    assert r["problem"]["deterministic"] is True and "index order" in r["ties"]
    assert reg["algorithm"] == "register" and reg["ties"].startswith("ties in index order in both modes")
    # under autotuning both kernels are offered where both fit
    r = explain_json(capsys, "64", "4096", "16", "--breadth", "curated")
    assert r["offered"] == ["topk_t128_kp16_reg", "topk_t256_kp16", "topk_t512_kp16"] and r["algorithm"] == "register"


def test_explain_topk_table_and_declines(capsys):
    assert main(["explain", "topk", "8", "40000", "8", "--smallest", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "topk ROWS=8 N=40000 K=8 dtype=bfloat16 smallest sorted" in out
    assert "declined: [size] 40000 elements along dim 1: the kernel takes rows of at most 32768" in out
    assert main(["explain", "topk", "100", "32768", "1024", "--unsorted"]) == 0
    out = capsys.readouterr().out
    assert "topk_t512_kp1024" in out and "unsorted" in out


def test_explain_topk_text_names_the_algorithm_its_reason_and_the_tie_order(capsys):
    assert main(["explain", "topk", "64", "4096", "32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "algorithm: radix" in lines
    assert any(ln.startswith("algorithm reason: k=32 > 16:") for ln in lines)
    assert any(ln.startswith("ties: ") and "lane-strided" in ln for ln in lines)
    assert main(["explain", "topk", "64", "4096", "8"]) == 0
    assert "algorithm: register" in capsys.readouterr().out.splitlines()
