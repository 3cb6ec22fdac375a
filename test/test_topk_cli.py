"""``python -m torch_flydsl explain topk ROWS N K``: the TopK family's answer as if on gfx950."""

import json

import pytest

from torch_flydsl.__main__ import main


@pytest.fixture(autouse=True)
def plugin_policy(monkeypatch):
    # The plugin's answer even where torch 2.15's in-tree TopK would serve (flydsl 0.3.x).
    monkeypatch.setenv("TORCH_FLYDSL_INTREE_POLICY", "plugin")


def test_explain_topk_offers_the_config_the_eager_path_uses(capsys):
    assert main(["explain", "topk", "64", "4096", "8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["op"] == "topk" and r["offered"] == ["topk_t256_kp8"]
    assert r["problem"]["rows"] == 64 and r["problem"]["n"] == 4096 and r["problem"]["k"] == 8
    assert r["problem"]["dtype"] == "float32" and r["problem"]["largest"] is True


def test_explain_topk_table_and_declines(capsys):
    assert main(["explain", "topk", "8", "40000", "8", "--smallest", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "topk ROWS=8 N=40000 K=8 dtype=bfloat16 smallest sorted" in out
    assert "declined: [size] 40000 elements along dim 1: the kernel takes rows of at most 32768" in out
    assert main(["explain", "topk", "100", "32768", "1024", "--unsorted"]) == 0
    out = capsys.readouterr().out
    assert "topk_t512_kp1024" in out and "unsorted" in out
