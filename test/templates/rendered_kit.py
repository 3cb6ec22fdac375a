"""Shared pieces of the rendered-kernel tests (test_*_rendered.py): compile one kernel with
FlyDSL's ISA dump on, in a fresh process (FlyDSL dumps only when it lowers; a kernel another
test compiled in this process would come from its in-memory cache), and summarize the ISA."""

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

MARK = "=== rendered kernel summary ==="


def dump_isa_to(dump_dir: str) -> None:
    """Make the next FlyDSL compile in this process write its ISA under ``dump_dir``."""
    os.environ["FLYDSL_DUMP_IR"] = "1"
    os.environ["FLYDSL_DUMP_DIR"] = dump_dir


def isa_code(dump_dir: str) -> list[str]:
    """The instructions of the one kernel dumped under ``dump_dir`` (directives dropped)."""
    (isa_file,) = Path(dump_dir).glob("*/*final_isa.s")
    lines = isa_file.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.startswith("\t") and not ln.strip().startswith(".")]


def family_counts(code: list[str], families: dict) -> list[str]:
    """One ``name: count`` line per instruction family (a regex matched at the line start)."""
    counts = Counter(name for ln in code for name, pat in families.items() if re.match(pat, ln))
    return [f"{name}: {counts[name]}" for name in families]


def resources(kernel) -> str:
    k = kernel
    return f"{k.name}: vgpr={k.vgpr} agpr={k.agpr} sgpr={k.sgpr} lds={k.lds_bytes} spills={k.spills} scratch={k.scratch_bytes}"


def summary_in_subprocess(test_file: str, render: str, args: tuple, tmp_path) -> str:
    """``render(*args, dump_dir)`` from module ``test_file`` (this directory), run in a fresh
    Python; returns what it returned."""
    here = str(Path(test_file).parent)
    module = Path(test_file).stem
    code = (f"import sys; sys.path.insert(0, {here!r}); from {module} import {render}; "
            f"from rendered_kit import MARK; s = {render}(*{args!r}, {str(tmp_path)!r}); print(MARK); print(s)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(MARK, 1)[1].strip()  # FlyDSL prints its dump paths before it
