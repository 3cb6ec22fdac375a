"""The dense custom op's per-call host path: the operand gate's cache answers exactly what the
gate would, keyed by everything the gate reads, and benchmarks/host_cost.py runs the real op
body end to end (its replaced GPU-only steps are reached, nothing falls back)."""

import importlib.util
from pathlib import Path

import torch

from torch_flydsl.templates.base import Decline
from torch_flydsl.templates.dense_gemm import family as dense_family
from torch_flydsl.templates.dense_gemm.family import FAMILY as family

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "host_cost.py"


def _call(a, b, out, cfg="m64n64k64_w2x2_s4_g0"):
    return family.parse_call("dense_mm_out", (a, b), {"cfg": cfg, "out": out})


def test_cached_gate_answers_per_geometry_like_the_uncached_one():
    a = torch.empty(64, 128, dtype=torch.bfloat16)
    b = torch.empty(96, 128, dtype=torch.bfloat16).t()
    out = torch.empty(64, 96, dtype=torch.bfloat16)
    ok = family.check_call(_call(a, b, out))
    assert not isinstance(ok, Decline) and ok == family._check_call(_call(a, b, out))
    # Same shapes, other geometry: an unaligned storage offset, then another dtype. The cache
    # must not answer from the first entry.
    shifted = torch.empty(64 * 128 + 1, dtype=torch.bfloat16)[1:].view(64, 128)
    d = family.check_call(_call(shifted, b, out))
    assert isinstance(d, Decline) and d.category == "alignment"
    d = family.check_call(_call(a.half(), b, out))
    assert isinstance(d, Decline) and d.category == "dtype"
    assert family.check_call(_call(a, b, out)) == ok  # and the first answer still stands


def test_a_key_that_is_not_a_config_raises_every_time_and_is_not_cached():
    a = torch.empty(64, 128, dtype=torch.bfloat16)
    b = torch.empty(128, 96, dtype=torch.bfloat16)
    out = torch.empty(64, 96, dtype=torch.bfloat16)
    before = len(dense_family._CHECKED)
    for _ in range(2):
        try:
            family.check_call(_call(a, b, out, cfg="not-a-config"))
        except ValueError:
            pass
        else:
            raise AssertionError("a bad key must raise")
    assert len(dense_family._CHECKED) == before


def test_host_cost_benchmark_runs_the_op_body_to_the_dispatch(capsys):
    spec = importlib.util.spec_from_file_location("host_cost", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--iters", "50", "--json"]) == 0  # asserts internally that dispatch was reached
    import json

    rows = json.loads(capsys.readouterr().out)
    assert rows["torch.ops dense_mm_out, whole host path"] > 0
    assert rows["operand gate, cached (check_call)"] < rows["operand gate, uncached (_check_call)"]
