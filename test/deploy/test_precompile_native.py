"""precompile writes the native launcher's files (issue 21 follow-up): each GEMM kernel's gfx950
code object and ``native/index.tsv`` under the manifest's ids, cut from the module FlyDSL just
built (no second compile), named in the manifest's ``native`` fields; a missing code object is
restored from FlyDSL's disk cache on the next run; ``--no-native`` writes none; the library
build that follows is a warning with the reason when it cannot happen, never a failed run.
Older manifests (no ``native`` fields) still load."""

import hashlib
import json

import pytest

from torch_flydsl.deploy import manifest as mf
from torch_flydsl.deploy.spec import SHAPES_FORMAT

from deploykit import cli, needs_disk_cache_keys  # noqa: E402


def tiny_spec(path):
    path.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": True, "m": 64, "n": 1024, "k": 4096}]}))
    return path


def index_of(cache) -> dict:
    lines = (cache / "native" / "index.tsv").read_text().splitlines()
    assert lines[0] == "# torch-flydsl native index v1"
    return {line.split("\t")[0]: line.split("\t") for line in lines[1:]}


@pytest.mark.compile
@needs_disk_cache_keys
def test_precompile_writes_each_kernels_code_object_and_restores_a_missing_one(tmp_path):
    from torch_flydsl.deploy.precompile import precompile
    from torch_flydsl.deploy.spec import load

    cache = tmp_path / "cache"
    units, _, _ = precompile(load(tiny_spec(tmp_path / "spec.json")), cache, progress=False)
    (unit,) = units.values()
    assert (unit.status, unit.native) == ("compiled", "exported")
    man = mf.read(cache)
    entry = man.kernels[unit.id]
    (line,) = index_of(cache).values()
    uid, family_cfg, file, size, kernel, params = line
    image = (cache / entry.native.file).read_bytes()
    assert uid == unit.id and family_cfg == f"dense_gemm/{unit.cfg.key()}" and "block_m=" in params
    assert entry.native.file == f"native/{file}" and file == hashlib.sha256(image).hexdigest() + ".hsaco"
    assert entry.native.size == int(size) == len(image) and entry.native.sha256 == file[:64]
    assert image[:4] == b"\x7fELF" and kernel.encode() in image
    assert (cache / entry.native.file).stat().st_mode & 0o777 == 0o600
    assert man.why_native_not_held(unit.id) is None

    again, _, _ = precompile(load(tmp_path / "spec.json"), cache, progress=False)
    assert [(u.status, u.native) for u in again.values()] == [("cached", "cached")]

    flydsl_binary = man.binary(unit.id)
    stamp = flydsl_binary.stat().st_mtime_ns
    (cache / entry.native.file).unlink()
    assert "missing" in mf.read(cache).why_native_not_held(unit.id) or "no such" in \
        mf.read(cache).why_native_not_held(unit.id).lower()
    restored, _, _ = precompile(load(tmp_path / "spec.json"), cache, progress=False)
    assert [(u.status, u.native) for u in restored.values()] == [("cached", "exported")]  # not compiled again
    assert (cache / entry.native.file).read_bytes() == image  # the same code object, from FlyDSL's disk cache
    assert flydsl_binary.stat().st_mtime_ns == stamp
    assert mf.read(cache).why_native_not_held(unit.id) is None


@pytest.mark.compile
@needs_disk_cache_keys
def test_no_native_writes_none_and_a_build_that_cannot_happen_is_a_warning(tmp_path, monkeypatch):
    spec, cache = tiny_spec(tmp_path / "spec.json"), tmp_path / "cache"
    off = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet", "--no-native")
    assert off.returncode == 0, off.stdout + off.stderr[-3000:]
    assert not (cache / "native").exists() and "native:" not in off.stdout and "native launcher" not in off.stderr
    assert all(e.native is None for e in mf.read(cache).kernels.values())

    monkeypatch.delenv("TORCH_FLYDSL_NATIVE")
    on = cli("precompile", "--spec", str(spec), "--cache-dir", str(cache), "--quiet",
             env={"CXX": str(tmp_path / "no-such-compiler")})
    assert on.returncode == 0, on.stdout + on.stderr[-3000:]
    assert "native: 1 of 1 kernel(s) have a code object for the C++ launcher" in on.stdout, on.stdout
    assert "precompile: warning: native launcher not built: no C++ compiler" in on.stderr, on.stderr[-3000:]
    assert "no-such-compiler not found" in on.stderr
    (uid,) = mf.read(cache).kernels
    assert uid in index_of(cache) and mf.read(cache).why_native_not_held(uid) is None


def _manifest(tmp_path, **extra):
    entry = {"file": "flydsl/launch/k.pkl", "size": 3, "sha256": "0" * 64, **extra}
    (tmp_path / mf.FILE_NAME).write_text(json.dumps({"format": mf.FORMAT, "version": mf.VERSION,
                                                     "kernels": {"dense_gemm-7/c/bfloat16/nt/bias0/ktail0": entry}}))


def test_a_manifest_without_native_fields_loads_and_one_with_a_bad_one_says_why(tmp_path):
    _manifest(tmp_path)
    (entry,) = mf.read(tmp_path).kernels.values()
    assert entry.native is None and "native" not in mf.read(tmp_path).to_json()["kernels"]["dense_gemm-7/c/bfloat16/nt/bias0/ktail0"]
    assert "has no native code object" in mf.read(tmp_path).why_native_not_held("dense_gemm-7/c/bfloat16/nt/bias0/ktail0")
    _manifest(tmp_path, native={"file": "flydsl/x.hsaco", "size": 3, "sha256": "1" * 64})
    with pytest.raises(mf.ManifestError, match=r"native: \"file\" must be a path under native/"):
        mf.read(tmp_path)
    _manifest(tmp_path, native={"file": "native/x.hsaco", "size": 3, "sha256": "1" * 64})
    (entry,) = mf.read(tmp_path).kernels.values()
    assert entry.native == mf.NativeFile("native/x.hsaco", 3, "1" * 64)
    assert json.loads(mf.read(tmp_path).text())["kernels"]["dense_gemm-7/c/bfloat16/nt/bias0/ktail0"]["native"] == {
        "file": "native/x.hsaco", "size": 3, "sha256": "1" * 64}
