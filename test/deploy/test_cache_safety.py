"""The deployment cache as an operator meets it (issue 23): damaged files, unusable
directories, concurrent and interrupted runs, full disks, exit codes and trust. Every test runs
the real CLI (``python -m torch_flydsl ...``) or a user script in a fresh process, on a fresh
cache directory.

Tests run as root, where permission bits do not stop writes: a read-only or full filesystem is
a real mount (read-only bind, small tmpfs) in a private mount namespace (``unshare -m``), and a
foreign owner is a real ``chown`` to ``nobody``.
"""

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from deploykit import cli, in_mount_namespace, needs_disk_cache_keys, needs_mounts, table_spec
from torch_flydsl import dispatch_table as dt
from torch_flydsl.deploy import manifest as mf

pytestmark = pytest.mark.compile

DECODE = "m16n64k128_w1x4_s3_g0_sk4"  # compiles in about 2 s
OTHERS = ["m16n64k128_w1x4_s3_g0", "m32n64k128_w2x2_s3_g0", "m64n64k64_w2x2_s4_g0"]
NOBODY = 65534


def no_traceback(r):
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr[-3000:]


def warnings_of(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("precompile: warning:")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache holding one kernel (and its table), built once: tests damage copies of it."""
    base = tmp_path_factory.mktemp("built")
    spec = table_spec(base / "table.json", {})
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(base / "cache"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return base


@pytest.fixture
def cache(built, tmp_path):
    target = tmp_path / "cache"
    shutil.copytree(built / "cache", target, symlinks=True)
    return target


@pytest.fixture
def spec(built):
    return built / "table.json"


def the_binary(cache):
    (entry,) = json.loads((cache / mf.FILE_NAME).read_text())["kernels"].values()
    return cache / entry["file"]


def run_only_env(cache):
    return {"TORCH_FLYDSL_CACHE_DIR": str(cache), "TORCH_FLYDSL_RUN_ONLY": "1"}


def explain(cache):
    r = cli("explain", "mm", "16", "4096", "4096", "--breadth", "curated", "--json", env=run_only_env(cache))
    no_traceback(r)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)
    return d["offered"], {x["config"]: x["reason"] for x in d["declined"] if x["category"] == "run-only"}


def doctor_line(cache):
    r = cli("doctor", env=run_only_env(cache))
    no_traceback(r)
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("precompiled kernels")]
    return line


# -- 1. a damaged manifest or table: a warning naming it, then a rebuild ----------------------

DAMAGED_MANIFESTS = {
    "truncated": (lambda text: text[: len(text) // 2], "not JSON"),
    "garbage": (lambda text: "\x00\x01 not a manifest \xff", "not JSON"),
    "empty": (lambda text: "", "(empty)"),
    "wrong types": (lambda text: json.dumps({**json.loads(text), "kernels": [1, 2]}), "\"kernels\" must map"),
    "unknown version": (lambda text: json.dumps({**json.loads(text), "version": 99}), "manifest version 99"),
}


@needs_disk_cache_keys
@pytest.mark.parametrize("damage", sorted(DAMAGED_MANIFESTS))
def test_precompile_into_a_damaged_manifest_warns_naming_it_and_rebuilds(cache, spec, damage):
    change, says = DAMAGED_MANIFESTS[damage]
    path = cache / mf.FILE_NAME
    path.write_text(change(path.read_text()))
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    no_traceback(r)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    (said,) = warnings_of(r)
    assert str(path) in said and says in said and "built again" in said, said
    assert "1 kernel(s) for 1 shape(s): 1 compiled" in r.stdout, r.stdout
    man = mf.read(cache)
    assert len(man.kernels) == 1 and all(man.holds(k) for k in man.kernels)


@needs_disk_cache_keys
def test_run_only_and_doctor_decline_a_manifest_with_wrong_types_with_the_reason(cache):
    path = cache / mf.FILE_NAME
    path.write_text(json.dumps({**json.loads(path.read_text()), "toolchain": 5}))
    offered, declined = explain(cache)
    assert offered == [] and all(str(path) in why and "toolchain" in why for why in declined.values()), declined
    line = doctor_line(cache)
    assert "none loadable" in line and str(path) in line and "toolchain" in line, line


@needs_disk_cache_keys
def test_precompile_with_a_damaged_dispatch_table_in_the_cache_warns_and_replaces_it(cache, spec):
    table = cache / dt.FILE_NAME
    table.write_text('{"format": "torch-flydsl-dispatch-table", "version": 1, "entries": [{"op": ')
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    no_traceback(r)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    (said,) = warnings_of(r)
    assert str(table) in said and "not JSON" in said and "replaced" in said, said
    assert dt.load(table).entries == dt.load(spec).entries


# -- 2. an unusable cache directory: exit 2, one line ------------------------------------------

def one_line_exit_2(r, *says):
    no_traceback(r)
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and all(s in lines[0] for s in says), r.stdout


def test_a_cache_dir_that_is_a_file_or_lies_under_one_exits_2_naming_it(tmp_path, spec):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    one_line_exit_2(cli("precompile", "--spec", str(spec), "--cache-dir", str(blocker), "--quiet"),
                    str(blocker), "is a file, not a directory")
    one_line_exit_2(cli("precompile", "--spec", str(spec), "--cache-dir", str(blocker / "cache"), "--quiet"),
                    str(blocker / "cache"), "a parent of", "is a file")


@needs_mounts
@needs_disk_cache_keys
def test_a_read_only_cache_dir_exits_2_even_when_every_kernel_is_built(cache, spec):
    setup = f"mount --bind '{cache}' '{cache}' && mount -o remount,bind,ro '{cache}'"
    r = in_mount_namespace(setup, [sys.executable, "-m", "torch_flydsl", "precompile", "--spec", str(spec),
                                   "--cache-dir", str(cache), "--quiet"])
    one_line_exit_2(r, str(cache), "Read-only file system")


# -- 3. concurrent runs lose nothing -----------------------------------------------------------

@needs_disk_cache_keys
def test_concurrent_precompiles_into_one_cache_keep_every_kernel_and_table_entry(tmp_path):
    cache = tmp_path / "cache"
    specs = [table_spec(tmp_path / f"t{i}.json", {"config": cfg, "n": 1024 * (i + 1)}) for i, cfg in enumerate(OTHERS)]
    env = {**os.environ}
    runs = [subprocess.Popen([sys.executable, "-m", "torch_flydsl", "precompile", "--spec", str(s), "--cache-dir",
                              str(cache), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for s in specs]
    outs = [p.communicate(timeout=900) for p in runs]
    assert [p.returncode for p in runs] == [0] * len(runs), outs
    ids = sorted(mf.read(cache).kernels)
    assert [i.split("/")[1] for i in ids] == sorted(OTHERS), ids
    assert sorted(e.config for e in dt.load(cache / dt.FILE_NAME).entries) == sorted(OTHERS)


# Another writer of the cache's table, following the lock convention of every writer (Recorder,
# winners, precompile): it reads the table under the lock, holds it while precompile builds, and
# writes what it read plus its own entry. A writer that ignores the lock loses its entry.
HOLD_THE_TABLE_LOCK = r"""
import fcntl, json, os, sys, time
table, manifest, config = sys.argv[1:4]
fd = os.open(table + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
doc = json.load(open(table))
print("locked", flush=True)
deadline = time.time() + 600
while time.time() < deadline and not (os.path.exists(manifest) and config in open(manifest).read()):
    time.sleep(0.1)
time.sleep(3)  # precompile has recorded its kernel and goes on to merge the table now
doc["entries"].append({"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": False, "m": 8, "n": 512, "k": 512,
                       "config": "m16n64k128_w1x4_s3_g0", "source": "hand"})
with open(table + ".tmp", "w") as f:
    json.dump(doc, f)
os.replace(table + ".tmp", table)
print("wrote", flush=True)
"""


@needs_disk_cache_keys
def test_precompile_merges_the_table_under_its_lock_keeping_another_writers_entry(cache, tmp_path):
    table = cache / dt.FILE_NAME
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_TABLE_LOCK, str(table), str(cache / mf.FILE_NAME),
                               OTHERS[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    spec = table_spec(tmp_path / "mine.json", {"config": OTHERS[1], "n": 2048})
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    out, err = holder.communicate(timeout=600)
    assert r.returncode == 0 and holder.returncode == 0, (r.stdout, r.stderr[-3000:], out, err)
    configs = sorted((e.n, e.config) for e in dt.load(table).entries)
    assert configs == [(512, "m16n64k128_w1x4_s3_g0"), (2048, OTHERS[1]), (4096, DECODE)], configs


# -- 4. a damaged binary is noticed ------------------------------------------------------------

BINARY_DAMAGE = {
    "random bytes": lambda data: random.Random(0).randbytes(len(data)),
    "truncated": lambda data: data[: len(data) // 2],
}


@needs_disk_cache_keys
@pytest.mark.parametrize("damage", sorted(BINARY_DAMAGE))
def test_a_damaged_binary_is_refused_by_run_only_and_doctor_and_rebuilt_by_precompile(cache, spec, damage):
    binary = the_binary(cache)
    binary.write_bytes(BINARY_DAMAGE[damage](binary.read_bytes()))
    says = "SHA-256" if damage == "random bytes" else "truncated or replaced"
    offered, declined = explain(cache)
    assert DECODE not in offered
    assert str(binary) in declined[DECODE] and says in declined[DECODE], declined[DECODE]
    line = doctor_line(cache)
    assert "0 of 1" in line and "refused" in line and str(binary) in line and says in line, line

    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    no_traceback(r)
    assert r.returncode == 0 and "1 compiled, 0 already in the cache" in r.stdout, r.stdout + r.stderr[-3000:]
    (said,) = warnings_of(r)
    assert str(binary) in said and says in said and "rebuilding" in said, said
    line = doctor_line(cache)
    assert "1 of 1" in line and "(loadable here)" in line, line


# -- 6. an interrupted run keeps what it finished ----------------------------------------------

@needs_disk_cache_keys
def test_an_interrupted_precompile_keeps_the_kernels_it_finished(tmp_path):
    cache = tmp_path / "cache"
    spec = table_spec(tmp_path / "three.json", *({"config": c, "n": 1024 * (i + 1)} for i, c in enumerate(OTHERS)))
    run = subprocess.Popen([sys.executable, "-m", "torch_flydsl", "precompile", "--spec", str(spec), "--cache-dir",
                            str(cache), "--quiet", "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listed = 0
    while run.poll() is None and not listed:
        try:
            listed = len(mf.read(cache).kernels)
        except mf.ManifestError:
            pass
        time.sleep(0.05)
    still_running = run.poll() is None
    if still_running:
        run.send_signal(signal.SIGKILL)  # as a killed job or a lost machine would stop it
    run.communicate(timeout=600)
    assert still_running and 1 <= listed < len(OTHERS), "the manifest listed no kernel before the run ended"
    again = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    kept = len(OTHERS) - int(again.stdout.split(" compiled,")[0].rsplit(" ", 1)[-1])
    assert kept >= listed and f"{kept} already in the cache" in again.stdout, again.stdout


# -- 7. exit codes, a full disk, --help --------------------------------------------------------

def test_a_spec_with_nothing_buildable_exits_1_and_names_the_unfit_config(tmp_path):
    table = table_spec(tmp_path / "unfit.json", {"m": 16, "n": 64, "k": 64})  # K=64: too few tiles for 4 splits
    r = cli("precompile", "--spec", str(table), "--cache-dir", str(tmp_path / "c"), "--quiet")
    no_traceback(r)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert f"not built: mm bfloat16 nt 16x64x64: [fit] {DECODE}" in r.stdout and "nothing was built" in r.stdout, r.stdout
    shapes = tmp_path / "huge.json"
    shapes.write_text(json.dumps({"format": "torch-flydsl-shapes", "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "m": 16, "n": 64, "k": 1 << 30}]}))
    r = cli("precompile", "--spec", str(shapes), "--cache-dir", str(tmp_path / "c"), "--quiet")
    assert r.returncode == 1 and "nothing was built" in r.stdout and "4 GiB" in r.stdout, r.stdout


@needs_disk_cache_keys
def test_an_unfit_table_entry_beside_a_built_one_exits_1_unless_allow_partial(cache, tmp_path):
    table = table_spec(tmp_path / "half.json", {}, {"m": 16, "n": 64, "k": 64})
    r = cli("precompile", "--spec", str(table), "--cache-dir", str(cache), "--quiet")
    assert r.returncode == 1 and "1 table entry names a config that does not fit" in r.stdout, r.stdout
    assert "--allow-partial" in r.stdout and f"[fit] {DECODE}" in r.stdout, r.stdout
    r = cli("precompile", "--spec", str(table), "--cache-dir", str(cache), "--quiet", "--allow-partial")
    assert r.returncode == 0 and "1 already in the cache" in r.stdout, r.stdout + r.stderr[-3000:]


@needs_mounts
@needs_disk_cache_keys
def test_on_a_full_disk_the_failed_kernel_says_no_space_left_on_device(tmp_path, spec):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    setup = f"mount -t tmpfs -o size=4k,mode=0700 tmpfs '{cache}'"  # one page: no binary fits
    r = in_mount_namespace(setup, [sys.executable, "-m", "torch_flydsl", "precompile", "--spec", str(spec),
                                   "--cache-dir", str(cache), "--quiet"])
    no_traceback(r)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    (failed,) = [ln for ln in r.stdout.splitlines() if ln.startswith("failed:")]
    assert "no space left on device" in failed and str(cache / "flydsl") in failed, r.stdout
    assert "disk cache may be off" not in r.stdout


def test_precompile_help_points_to_the_real_ways_of_recording_shapes():
    r = cli("precompile", "--help")
    assert r.returncode == 0
    flat = " ".join(r.stdout.split())
    assert "see `record`" not in flat and "record_shapes()" in flat and "TORCH_FLYDSL_RECORD_SHAPES" in flat, flat
    assert "--allow-partial" in flat and "--shared" in flat


# -- 8. recording: a failed save keeps what was recorded ---------------------------------------

RECORD_ON_A_FULL_DISK = r"""
import json, os, sys
from torch_flydsl.deploy.record import Recorder
from torch_flydsl.deploy.spec import Shape
d = sys.argv[1]
path = os.path.join(d, "shapes.json")
first = Recorder()
first.note(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=16, n=4096, k=4096))
first.save(path)
fd = os.open(os.path.join(d, "filler"), os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    pass
more = Recorder()
for m in range(1, 400):
    more.note(Shape.of("mm", dtype="bfloat16", layout="nt", bias=False, m=m, n=4096, k=4096))
try:
    more.save(path)
    saved = "saved"
except OSError as e:
    saved = f"{type(e).__name__}: {e}"
try:
    kept = [s["m"] for s in json.load(open(path))["shapes"]]
except ValueError as e:
    kept = f"unreadable: {e}"
print(json.dumps({"save": saved, "kept": kept, "left": sorted(os.listdir(d))}))
"""


@needs_mounts
def test_a_record_save_that_fails_on_a_full_disk_keeps_the_shapes_recorded_before(tmp_path):
    where = tmp_path / "rec"
    where.mkdir()
    r = in_mount_namespace(f"mount -t tmpfs -o size=64k,mode=0700 tmpfs '{where}'",
                           [sys.executable, "-c", RECORD_ON_A_FULL_DISK, str(where)])
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "No space left on device" in out["save"], out
    assert out["kept"] == [16], out
    assert out["left"] == ["filler", "shapes.json", "shapes.json.lock"], out  # no temp file left behind


# -- 9. trust: a cache others could write is refused; --shared for another serving user -------

@needs_disk_cache_keys
def test_run_only_and_doctor_refuse_a_cache_dir_others_can_write(cache):
    os.chmod(cache, 0o777)
    offered, declined = explain(cache)
    assert offered == [] and declined, declined
    assert all("not trusted" in why and f"{cache} is writable by its group and others (mode 0777)" in why
               for why in declined.values()), declined
    line = doctor_line(cache)
    assert "NOT loadable here" in line and "not trusted" in line and str(cache) in line, line


@needs_disk_cache_keys
def test_run_only_refuses_a_binary_owned_by_another_user(cache):
    binary = the_binary(cache)
    os.chown(binary, NOBODY, NOBODY)
    offered, declined = explain(cache)
    assert DECODE not in offered
    assert f"{binary} is owned by" in declined[DECODE] and "not by this user" in declined[DECODE], declined[DECODE]


@needs_disk_cache_keys
def test_precompile_refuses_a_cache_dir_others_can_write(cache, spec):
    os.chmod(cache, 0o775)
    one_line_exit_2(cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet"),
                    str(cache), "writable by its group (mode 0775)")


@needs_disk_cache_keys
def test_a_shared_precompile_makes_the_cache_group_readable_and_run_only_trusts_it(cache, spec):
    r = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet", "--shared")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    modes = {str(p.relative_to(cache)): stat.S_IMODE(p.stat().st_mode) for p in [cache, *cache.rglob("*")]}
    wrong = {p: f"{m:04o}" for p, m in modes.items()
             if m != (0o750 if (cache / p).is_dir() else 0o640)}
    assert not wrong and len(modes) > 5, wrong
    offered, _ = explain(cache)
    assert DECODE in offered
