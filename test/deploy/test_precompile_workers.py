"""``precompile`` builds in compile workers (``runtime.workers``): killing the run, however it
is killed, leaves no worker behind and no worker holding the caller's stdout/stderr (a CI step
would hang on it), and a build that aborts fails that kernel alone, naming the signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploykit import cli, table_spec
from torch_flydsl.deploy import manifest as mf

pytestmark = pytest.mark.compile

CONFIGS = ["m16n64k128_w1x4_s3_g0", "m32n64k128_w2x2_s3_g0", "m64n64k64_w2x2_s4_g0"]
STANDIN = Path(__file__).resolve().parents[1] / "runtime"  # abort_standin_compiler.py


def three_kernels(tmp_path) -> Path:
    return table_spec(tmp_path / "three.json", *({"config": c, "n": 1024 * (i + 1)} for i, c in enumerate(CONFIGS)))


def workers_of(pid: int) -> list:
    """The compile workers whose parent is ``pid``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"torch_flydsl.runtime._worker" in cmd:
            found.append(int(d.name))
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_precompile_leaves_no_worker_and_none_holding_its_streams(tmp_path, sig):
    run = subprocess.Popen([sys.executable, "-m", "torch_flydsl", "precompile", "--spec", str(three_kernels(tmp_path)),
                            "--cache-dir", str(tmp_path / "cache"), "--quiet", "--jobs", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    found = []
    while run.poll() is None and len(found) < 2 and time.monotonic() < deadline:
        found = workers_of(run.pid)
        time.sleep(0.05)
    assert len(found) == 2 and run.poll() is None, "precompile did not start its two workers"
    run.send_signal(sig)
    t0 = time.perf_counter()
    run.communicate(timeout=60)  # end of file on both pipes: no worker holds them
    assert time.perf_counter() - t0 < 10
    deadline = time.monotonic() + 5
    while any(running(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(p) for p in found), f"workers {found} outlived precompile"


def test_a_build_that_aborts_fails_that_kernel_alone_naming_the_signal(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import abort_standin_compiler\nabort_standin_compiler.install()\n")
    cache = tmp_path / "cache"
    r = cli("precompile", "--spec", str(three_kernels(tmp_path)), "--cache-dir", str(cache), "--quiet", "--jobs", "2",
            env={"PYTHONPATH": f"{site}:{STANDIN}", "STANDIN_ABORT_CONFIG": CONFIGS[0]})
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr[-3000:]
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("failed: ")]
    assert len(failed) == 1 and CONFIGS[0] in failed[0] and "killed by signal SIGABRT" in failed[0], r.stdout
    assert "abort stand-in" in failed[0]
    assert len(mf.read(cache).kernels) == 2 and "2 compiled" in r.stdout and "1 failed" in r.stdout, r.stdout


def test_a_spec_whose_kernels_are_all_built_compiles_nothing_and_takes_under_2_s(tmp_path):
    spec = table_spec(tmp_path / "one.json", {"config": CONFIGS[0]})
    cache = tmp_path / "cache"
    first = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import abort_standin_compiler\nabort_standin_compiler.install()\n")
    # Any compile of that kernel now aborts its worker: the second run must not start one.
    again = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet",
                env={"PYTHONPATH": f"{site}:{STANDIN}", "STANDIN_ABORT_CONFIG": CONFIGS[0]})
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    line = again.stdout.strip().splitlines()[-1]
    assert "0 compiled, 1 already in the cache, 0 failed" in line, again.stdout
    seconds = float(line.split(" in ")[-1].split(" s ")[0])
    assert seconds < 2.0, line  # precompile's own time, after the interpreter and torch imported
