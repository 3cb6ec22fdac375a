"""The layer order of docs/architecture.md holds: no module imports from a layer above its own,
at module level or inside a function (import-linter's contracts in pyproject.toml, over the
import graph grimp reads from this tree's sources; nothing is imported or run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import importlinter  # noqa: F401 - in the test extras (scripts/setup.sh): a missing one fails, never skips

REPO = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the package under ``root`` with ``root``'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", str(root / "pyproject.toml")], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)


def broken(output: str) -> str:
    """The report's broken contracts, each violating import as ``importer -> imported (l.N)``."""
    return output[output.index("Broken contracts"):] if "Broken contracts" in output else output


def test_no_module_imports_from_a_layer_above_its_own():
    r = lint(REPO)
    assert r.returncode == 0, "an import runs against docs/architecture.md's layers:\n" + broken(r.stdout + r.stderr)
    assert "Contracts: 2 kept, 0 broken." in r.stdout, r.stdout


def test_a_function_level_import_from_a_higher_layer_fails_naming_the_import(tmp_path):
    """The check sees imports inside functions, and names the offending one."""
    shutil.copytree(REPO / "torch_flydsl", tmp_path / "torch_flydsl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    config = tmp_path / "torch_flydsl" / "config.py"
    config.write_text(config.read_text() + "\n\ndef _planted():\n    from .inductor import offer  # noqa: F401\n")
    r = lint(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"torch_flydsl\.config -> torch_flydsl\.inductor\.offer \(l\.\d+\)", r.stdout), r.stdout


def test_the_documented_layer_order_is_the_contracts():
    from importlinter.api import read_configuration

    contracts = read_configuration(str(REPO / "pyproject.toml"))["contracts_options"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    text = (REPO / "docs" / "architecture.md").read_text()
    block = re.search(r"## Layers\n.*?```text\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```text block of layers under '## Layers'"
    documented = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert documented == [layer.strip() for layer in layers]
