"""deploy.files: the atomic write and the locked read-modify-write every deployment file goes
through (manifest, dispatch table, recorded shapes, winners)."""

import os
import stat
import subprocess
import sys

from torch_flydsl.deploy.files import atomic_write, update

# Each process adds its own lines to one file, one locked update at a time: with the lock
# nothing is lost however the processes interleave.
APPEND = r"""
import sys
from pathlib import Path
from torch_flydsl.deploy.files import update
path, me = Path(sys.argv[1]), sys.argv[2]
for i in range(40):
    update(path, lambda: (path.read_text() if path.exists() else "") + f"{me}.{i}\n")
"""


def test_concurrent_locked_updates_lose_nothing(tmp_path):
    path = tmp_path / "merged.txt"
    procs = [subprocess.Popen([sys.executable, "-c", APPEND, str(path), str(n)]) for n in range(6)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 6
    lines = path.read_text().splitlines()
    assert sorted(lines) == sorted(f"{n}.{i}" for n in range(6) for i in range(40))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_atomic_write_keeps_the_old_mode_or_sets_the_one_asked(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    atomic_write(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    atomic_write(path, b"newer", mode=0o600)
    assert path.read_bytes() == b"newer" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_change_leaves_the_file_as_it_was(tmp_path):
    import pytest

    path = tmp_path / "t.json"
    path.write_text("kept")

    def broken():
        raise RuntimeError("mid-merge")

    with pytest.raises(RuntimeError):
        update(path, broken)
    assert path.read_text() == "kept"
