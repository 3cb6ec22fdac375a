"""TORCH_FLYDSL_RECORD_WINNERS: Inductor's autotuning results become dispatch-table entries.

Plumbing (the FlyDSL choices run the float64 reference stand-in, and the probe decides who wins
with ``force_win`` / ``force_lose``: CPU timings say nothing): what is under test is that a
FlyDSL win is written with its shape, config and time, and a loss is not."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from torch_flydsl import dispatch_table as dt

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
        c.benchmark = lambda *a, **k: 1e-6
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
