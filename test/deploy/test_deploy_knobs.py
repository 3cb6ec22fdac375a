"""Bad values of the deployment knobs (test/faults/test_fault_knobs.py lists these tests):
the run goes on and one warning names the variable."""

import os
import subprocess
import sys


def test_an_unusable_cache_dir_warns_once_and_compiles_in_memory(tmp_path, monkeypatch, caplog):
    from torch_flydsl.runtime import compile as rc

    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TORCH_FLYDSL_CACHE_DIR", str(blocker))
    rc._cache_warned.clear()
    with caplog.at_level("WARNING", logger="torch_flydsl"):
        assert rc._usable_cache_dir() is None
        assert rc._usable_cache_dir() is None
    said = [r.getMessage() for r in caplog.records if "TORCH_FLYDSL_CACHE_DIR" in r.getMessage()]
    assert len(said) == 1 and str(blocker) in said[0] and "compile in memory" in said[0], caplog.text
    with rc.device_compile_env("gfx950"):  # binaries go through a private per-process dir instead
        private = os.environ["FLYDSL_RUNTIME_CACHE_DIR"]
        assert not private.startswith(str(blocker)) and os.path.isdir(private), private


RECORD = r"""
import torch
from torch_flydsl.deploy.record import note_from_env
note_from_env("mm", [torch.empty(4, 8, dtype=torch.bfloat16), torch.empty(8, 16, dtype=torch.bfloat16)])
print("ran")
"""


def test_an_unwritable_record_file_warns_at_exit_and_the_run_succeeds(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    env = {**os.environ, "TORCH_FLYDSL_RECORD_SHAPES": str(blocker / "shapes.json")}
    r = subprocess.run([sys.executable, "-c", RECORD], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr[-3000:]
    said = [ln for ln in r.stderr.splitlines() if "TORCH_FLYDSL_RECORD_SHAPES=" in ln]
    assert len(said) == 1 and "could not write the recorded shapes" in said[0], r.stderr[-3000:]
