"""TORCH_FLYDSL_RECORD_WINNERS: Inductor's autotuning results become dispatch-table entries.

Plumbing (the FlyDSL choices run the float64 reference stand-in, and the probe decides who wins
with ``force_win`` / ``force_lose``: CPU timings say nothing): what is under test is that a
FlyDSL win is written with its shape, config and time, and a loss is not. Then the judgement on
Inductor's feedback alone (``winners.note`` with stand-in choices and set timings): the tie band,
bogus times, the decided shapes' old entries."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_flydsl import dispatch_table as dt
from torch_flydsl.deploy import winners
from torch_flydsl.templates.base import TensorMeta

PROBE = Path(__file__).parent.parent / "inductor" / "compile_probe.py"


def probe(tmp_path, table, **opts):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_FLYDSL_EXECUTOR": "reference-standin", "TORCH_FLYDSL_INTREE_POLICY": "plugin",
           "TORCH_FLYDSL_RECORD_WINNERS": str(table)}
    r = subprocess.run([sys.executable, str(PROBE), json.dumps({"shape": [64, 128, 256], **opts})],
                       capture_output=True, text=True, env=env, timeout=900)
    return r


def test_a_flydsl_win_becomes_an_entry_and_a_loss_does_not_plumbing_with_reference_standin(tmp_path):
    table = tmp_path / "table.json"
    r = probe(tmp_path / "win", table, op="linear", layout="nt", force_win=True)
    assert r.returncode == 0, r.stderr[-3000:]
    t = dt.load(table)
    (e,) = t.entries
    assert (e.op, e.dtype, e.layout, e.bias, e.m, e.n, e.k, e.source) == ("mm", "bfloat16", "nt", True, 64, 128, 256,
                                                                          "inductor")
    assert t.lookup("mm", torch.bfloat16, "nt", True, 64, 128, 256) == e.config and e.us is not None
    r = probe(tmp_path / "lose", table, op="mm", force_lose=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert dt.load(table).entries == t.entries  # the lost mm (layout nn) added nothing, the old entry stayed


FORCED_WIN = r"""
import torch
from torch._inductor import config as ic
from torch_flydsl.inductor import choices

bind = choices.FlyDSLChoicesMixin._flydsl_bind


def bind_winning(self, *args):
    callers = bind(self, *args)
    for c in callers:
        c.benchmark = lambda *a, **k: 1e-3  # 1 us: beats the CPU's ATen mm, above the roofline
    return callers


choices.FlyDSLChoicesMixin._flydsl_bind = bind_winning
a, b = torch.randn(64, 256, dtype=torch.bfloat16), torch.randn(256, 128, dtype=torch.bfloat16)
with ic.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,FLYDSL"):
    torch.compile(torch.mm)(a, b)
print("compiled")
"""


def test_an_unwritable_winners_file_warns_at_exit_and_the_compile_succeeds(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_FLYDSL_EXECUTOR": "reference-standin", "TORCH_FLYDSL_INTREE_POLICY": "plugin",
           "TORCH_FLYDSL_RECORD_WINNERS": str(blocker / "t.json")}
    r = subprocess.run([sys.executable, "-c", FORCED_WIN], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0 and r.stdout.strip() == "compiled", r.stderr[-3000:]
    said = [ln for ln in r.stderr.splitlines() if "TORCH_FLYDSL_RECORD_WINNERS=" in ln]
    assert len(said) == 1 and "could not write Inductor's FlyDSL winners" in said[0], r.stderr[-3000:]


# --- The judgement (deploy.verdict's rules), on Inductor's feedback alone -----------------------
# A 16x4096x4096 bf16 mm: its warm roofline is ~1.96 us (33.7 MB at 17.2 TB/s), so 4-6 us
# timings are plausible and 1e-6 ms is not.

class FlyDSLChoice:
    def __init__(self, key):
        self.description = f"FlyDSL {key}"


class ExternKernelCaller:  # named as Inductor's class, which _label reads ATen's op name from
    description = ""

    def __init__(self, op):
        self.name = f"aten_{op}"
        self.choice = type("Choice", (), {"name": op})()


SK = "m16n64k128_w1x4_s3_g0_sk4"


def metas(bias=False):
    x, w = TensorMeta.contiguous((16, 4096), torch.bfloat16), TensorMeta((4096, 4096), (1, 4096), torch.bfloat16)
    return ([TensorMeta.contiguous((4096,), torch.bfloat16)] if bias else []) + [x, w]


@pytest.fixture
def fresh(monkeypatch):
    """The recorder's process state, emptied for one test (nothing registered: no saver thread)."""
    monkeypatch.setattr(winners, "_entries", {})
    monkeypatch.setattr(winners, "_decided", set())
    monkeypatch.setattr(winners, "_unsaved", False)
    return winners


def judged(caplog, timings, bias=False):
    with caplog.at_level(logging.INFO, logger="torch_flydsl"):
        winners.note(timings, "addmm" if bias else "mm", metas(bias))
    said = [r.getMessage() for r in caplog.records if winners.ENV in r.getMessage()]
    caplog.clear()
    return said


def test_a_win_beyond_the_tie_band_is_an_entry_and_says_over_whom(fresh, caplog):
    (said,) = judged(caplog, {FlyDSLChoice(SK): 0.0046, FlyDSLChoice("m16n16k128_w1x1_s8_g0"): 0.0050,
                              ExternKernelCaller("mm"): 0.0060})
    (e,) = fresh._entries.values()
    assert (e.op, e.m, e.n, e.k, e.bias, e.config, e.us, e.source) == ("mm", 16, 4096, 4096, False, SK, 4.6, "inductor")
    assert "mm bfloat16 nt M=16 N=4096 K=4096: entry: wins 1.304x over ATen mm" in said, said
    assert not fresh._decided


@pytest.mark.parametrize("flydsl_ms, why", [
    (0.00597, "tie with ATen mm (1.005x, within +-1%)"),  # nominally faster: a tie keeps ATen's kernel
    (0.00603, "tie with ATen mm (0.995x"),
    (0.0080, "ATen mm is faster (0.750x)"),
    (1e-6, "bogus timing: FlyDSL m16n64k128_w1x4_s3_g0_sk4's 0.001 us is under 0.9 x the roofline"),
    (-0.001, "bogus timing: FlyDSL m16n64k128_w1x4_s3_g0_sk4 -0.001 ms"),
])
def test_a_tie_a_loss_or_a_bogus_time_is_no_entry_but_decides_the_shape(fresh, caplog, flydsl_ms, why):
    (said,) = judged(caplog, {FlyDSLChoice(SK): flydsl_ms, ExternKernelCaller("mm"): 0.0060})
    assert not fresh._entries
    assert fresh._decided == {("mm", "bfloat16", "nt", False, 4096, 4096, 0, 16)}
    assert ": no entry: " in said and why in said, said


def test_a_bogus_rival_time_is_no_entry_either(fresh, caplog):
    """pytorch#193658: ROCm autotuning recorded near-zero and negative times; a FlyDSL win over
    one is no win."""
    for rival_ms in (1e-7, -0.002):
        (said,) = judged(caplog, {FlyDSLChoice(SK): 0.0046, ExternKernelCaller("mm"): rival_ms})
        assert not fresh._entries and "bogus timing" in said, said


def test_flydsl_alone_among_the_backends_decides_nothing(fresh, caplog):
    (said,) = judged(caplog, {FlyDSLChoice(SK): 0.0046, FlyDSLChoice("m16n16k128_w1x1_s8_g0"): 0.0050})
    assert not fresh._entries and not fresh._decided and not fresh._unsaved
    assert "nothing decided: no other choice was timed" in said, said


def test_the_newest_judgement_of_a_shape_replaces_an_older_one(fresh, caplog):
    judged(caplog, {FlyDSLChoice(SK): 0.0046, ExternKernelCaller("mm"): 0.0060})
    judged(caplog, {FlyDSLChoice(SK): 0.0060, ExternKernelCaller("mm"): 0.0060})
    assert not fresh._entries and len(fresh._decided) == 1
    judged(caplog, {FlyDSLChoice(SK): 0.0046, ExternKernelCaller("mm"): 0.0060})
    assert len(fresh._entries) == 1 and not fresh._decided


def old_table(path):
    def entry(bias, m, config):
        return dt.Entry("mm", "bfloat16", "nt", bias, m, 4096, 4096, config, "bench", None)

    t = dt.DispatchTable([entry(False, 16, SK), entry(True, 16, SK), entry(False, (1, 64), "m32n64k128_w2x2_s6_g0"),
                          entry(False, 32, SK)])
    t.save(path)
    return t


def test_a_decided_shape_drops_its_old_entries_and_cuts_a_range_around_its_m(fresh, caplog, tmp_path):
    path = tmp_path / "table.json"
    old_table(path)
    judged(caplog, {FlyDSLChoice(SK): 0.0060, ExternKernelCaller("mm"): 0.0060})  # mm (no bias) at M=16: a tie
    fresh._save(str(path))
    kept = {(e.bias, e.m, e.config) for e in dt.load(path).entries}
    assert kept == {(True, 16, SK),  # the bias variant was not timed: kept
                    (False, (1, 15), "m32n64k128_w2x2_s6_g0"), (False, (17, 64), "m32n64k128_w2x2_s6_g0"),
                    (False, 32, SK)}
    assert dt.load(path).lookup("mm", torch.bfloat16, "nt", False, 16, 4096, 4096) is None  # ATen's again


def test_a_win_replaces_the_old_entry_of_its_shape(fresh, caplog, tmp_path):
    path = tmp_path / "table.json"
    old_table(path)
    judged(caplog, {FlyDSLChoice("m16n16k128_w1x1_s8_g0"): 0.0046, ExternKernelCaller("addmm"): 0.0060}, bias=True)
    fresh._save(str(path))
    t = dt.load(path)
    assert t.lookup("mm", torch.bfloat16, "nt", True, 16, 4096, 4096) == "m16n16k128_w1x1_s8_g0"
    assert t.lookup("mm", torch.bfloat16, "nt", False, 16, 4096, 4096) == SK and len(t.entries) == 4


def test_only_non_wins_create_no_file(fresh, caplog, tmp_path):
    judged(caplog, {FlyDSLChoice(SK): 0.0080, ExternKernelCaller("mm"): 0.0060})
    fresh._save(str(tmp_path / "table.json"))
    assert not (tmp_path / "table.json").exists()
