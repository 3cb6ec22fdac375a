"""The kernel-family contract (``torch_flydsl.templates.family``): a family joins every part of
torch_flydsl through one registry call, the registry names what a family lacks, and nothing
outside the families branches on an op's name."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STANDIN = r"""
import json, sys
import torch
from torch_flydsl import registry
registry.register("standin_family.family")  # the one call

out = {}
from torch_flydsl.explain import explain, explain_standin_gemm
ex = explain("standin_gemm", 16, 32, 64, breadth="curated")
out["explain"] = [ex.op, ex.serving.served_by, [c.key() for c in ex.offered]]
ex = explain_standin_gemm(16, 32, 48, dtype="bf16", breadth="curated")
out["explain_tail"] = [[c.key() for c in ex.offered], [c.key() for c, _ in ex.declined]]
ex = explain("standin_gemm", 0, 32, 64)
out["explain_decline"] = [ex.serving.served_by, ex.serving.reason]

from torch_flydsl.deploy import spec
from torch_flydsl.deploy.precompile import plan_units
path = sys.argv[1] + "/shapes.json"
open(path, "w").write(json.dumps({"format": spec.SHAPES_FORMAT, "version": 1, "breadth": "curated",
                                  "shapes": [{"op": "standin_gemm", "dtype": "float16", "m": 8, "n": 16, "k": 32}]}))
loaded = spec.load(path)
out["spec"] = [[c.key() for c in w.configs] for w in loaded.work]
out["units"] = sorted(plan_units(loaded)[0])
try:
    open(path, "w").write(json.dumps({"format": spec.SHAPES_FORMAT, "version": 1,
                                      "shapes": [{"op": "standin_gemm", "dtype": "float32", "m": 8, "n": 16, "k": 32}]}))
    spec.load(path)
except spec.SpecError as e:
    out["spec_error"] = str(e)

from torch_flydsl import dispatch_table as dt
doc = {"format": dt.FORMAT, "version": dt.VERSION, "arch": "gfx950",
       "entries": [{"op": "standin_gemm", "dtype": "bfloat16", "m": [1, 64], "n": 32, "k": 64,
                    "config": "standin_b32"}]}
table = dt.parse(doc)
out["table"] = table.lookup("standin_gemm", torch.bfloat16, "nt", False, 16, 32, 64)
for bad in ({"config": "standin_b48"}, {"bias": True}, {"layout": "tn"}):
    try:
        dt.parse(dict(doc, entries=[dict(doc["entries"][0], **bad)]))
    except dt.TableError as e:
        out.setdefault("table_errors", []).append(str(e))

from torch_flydsl import doctor
out["doctor"] = [r for r in doctor.family_rows() if r[0] == "standin_family"]
out["doctor_serves"] = "standin_gemm" in doctor.report()

from torch_flydsl.__main__ import main
out["cli_explain"] = main(["explain", "standin_gemm", "16", "32", "64", "--dtype", "bf16"])
out["bench"] = main(["bench", "standin_gemm", "--out", sys.argv[1] + "/bench"])
print("RESULT " + json.dumps(out))
"""


def _run_standin(tmp_path, code=STANDIN):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "test"), str(ROOT)]),
               TORCH_FLYDSL_EXECUTOR="reference-standin", TORCH_FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), r.stdout


def test_a_standin_family_joins_explain_precompile_tables_doctor_and_bench_with_one_registry_call(tmp_path):
    got, stdout = _run_standin(tmp_path)
    assert got["explain"] == ["standin_gemm", "plugin", ["standin_b16", "standin_b32", "standin_b64"]]
    assert got["explain_tail"] == [["standin_b16"], ["standin_b32", "standin_b64"]]  # K=48
    assert got["explain_decline"] == ["pytorch", "[shape] M=0: nothing to compute"]
    assert got["spec"] == [["standin_b16", "standin_b32"]]  # K=32: block 64 does not divide it
    assert got["units"] == ["standin-1/standin_b16/float16", "standin-1/standin_b32/float16"]
    assert "dtype 'float32' is not one of bfloat16, float16" in got["spec_error"]
    assert got["table"] == "standin_b32"
    errors = got["table_errors"]
    assert "config 'standin_b48': block 48 is not 16, 32 or 64" in errors[0]
    assert "standin_gemm entries have no bias" in errors[1]
    assert "layout 'tn' is not one of nt (op standin_gemm)" in errors[2]
    assert got["doctor"] == [["standin_family", "standin_gemm", "standin-1", 3]] and got["doctor_serves"]
    assert got["cli_explain"] == 0 and "standin_gemm M=16 N=32 K=64 dtype=bfloat16" in stdout
    assert got["bench"] == 0, stdout[-3000:]
    assert "== standin_gemm: stand-in GEMM (plumbing only)" in stdout, stdout[-3000:]
    assert "FlyDSL configs (every shape): standin_b16, standin_b32, standin_b64" in stdout


def test_the_registry_names_the_member_a_family_lacks_and_import_torch_still_works(tmp_path):
    pkg = tmp_path / "broken_family"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "family.py").write_text(textwrap.dedent("""
        from torch_flydsl.templates.family import EagerOverride, KernelFamily


        class Broken(KernelFamily):  # an eager override, but no eager_call
            name = "broken"
            package = __package__
            config_class = "BrokenConfig"
            eager_overrides = (EagerOverride("erfinv", "erfinv"),)


        FAMILY = Broken()
    """))
    code = textwrap.dedent("""
        import logging, sys
        sys.path.insert(0, sys.argv[1])
        import torch
        from torch_flydsl import registry
        from torch_flydsl.templates.family import FamilyError
        logging.basicConfig(level=logging.ERROR, format="LOG %(message)s")
        registry.register("broken_family.family")
        names = [f.name for f in registry.families()]
        assert "broken" not in names and "dense_gemm" in names, names
        try:
            registry.check_all()
        except FamilyError as e:
            print("RAISED", e)
        print("RESULT {}")
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    said = "family 'broken' (broken_family.family): missing member 'eager_call' (it declares eager overrides)"
    assert f"RAISED {said}" in r.stdout
    assert said in r.stderr  # families() logs it and leaves the family out


def test_every_registered_family_meets_the_contract():
    from torch_flydsl import registry

    assert [f.name for f in registry.check_all()] == [f.name for f in registry.families()]
    assert len(registry.families()) == len(registry.FAMILY_MODULES)


OP_NAMES = {"mm", "addmm", "scaled_mm", "scaled_mm_v2", "grouped_mm", "scaled_grouped_mm", "rms_norm", "topk"}
NO_OP_NAMES = ["torch_flydsl/dispatch_table.py", "torch_flydsl/deploy", "torch_flydsl/explain.py",
               "torch_flydsl/__main__.py", "torch_flydsl/serving.py", "torch_flydsl/bench/cli.py",
               "torch_flydsl/doctor.py", "torch_flydsl/registry.py", "torch_flydsl/eager.py", "torch_flydsl/ops.py"]


def _docstrings(tree) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def op_name_literals(path: Path) -> list:
    """``(line, literal)`` for each string literal in ``path`` equal to a family's op name
    (docstrings aside: they may say what an op is)."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in OP_NAMES and id(n) not in docs]


def test_no_op_name_literal_outside_the_families():
    files = [p for rel in NO_OP_NAMES for p in ((ROOT / rel).rglob("*.py") if (ROOT / rel).is_dir() else [ROOT / rel])]
    found = {str(p.relative_to(ROOT)): hits for p in files if (hits := op_name_literals(p))}
    assert found == {}


def test_the_literal_finder_finds_a_literal(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('"""mm is fine in a docstring."""\nOPS = ("mm", "conv")\n')
    assert op_name_literals(p) == [(2, "mm")]
