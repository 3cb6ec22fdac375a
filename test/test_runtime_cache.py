"""FlyDSL's kernel cache: the user's FLYDSL_RUNTIME_CACHE_DIR wins; ours is private to the user; and
which cache files are trusted enough to be handed to FlyDSL (runtime.trust)."""

import os
import stat

from torch_flydsl.runtime import cache


def test_user_choice_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.flydsl_cache_dir() == tmp_path / "mine"


def test_default_is_under_inductor_cache_and_private(monkeypatch, tmp_path):
    monkeypatch.delenv("FLYDSL_RUNTIME_CACHE_DIR", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    d = cache.flydsl_cache_dir()
    assert d == tmp_path / "inductor" / "torch_flydsl" / "flydsl_cache"
    for p in (d, d.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700


def test_private_rocm_dir_relinks_a_dangling_lld(monkeypatch, tmp_path):
    from torch_flydsl.runtime import compile as rc

    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    real = tmp_path / "ld.lld-19"
    real.write_text("#!/bin/sh\n")
    monkeypatch.setattr(rc, "find_lld", lambda: real)
    root = rc._rocm_path_with_lld()
    link = tmp_path / "inductor" / "torch_flydsl" / "rocm_lld" / "llvm" / "bin" / "ld.lld"
    assert root and link.resolve() == real.resolve()
    link.unlink()
    link.symlink_to(tmp_path / "gone")  # e.g. lld-19 was removed and lld-20 installed
    assert rc._rocm_path_with_lld() == root and link.resolve() == real.resolve()


# -- runtime.trust: whose files a cache reader hands to FlyDSL (its binaries are pickles) -----

NOBODY = 65534


def test_a_private_directory_and_file_are_trusted(tmp_path):
    from torch_flydsl.runtime.trust import untrusted

    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    (d / "f").write_text("x")
    assert untrusted(d) is None and untrusted(d / "f") is None


def test_group_or_other_write_is_refused_and_said(tmp_path):
    import pytest

    from torch_flydsl.runtime.trust import refuse_untrusted, untrusted

    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, 0o775)
    assert untrusted(d) == f"{d} is writable by its group (mode 0775)"
    os.chmod(d, 0o757)
    assert untrusted(d / "missing") == f"{d / 'missing'} cannot be checked (No such file or directory)"
    (d / "f").write_text("x")
    assert untrusted(d / "f") == f"{d} is writable by others (mode 0757)"  # a parent others can write
    with pytest.raises(PermissionError, match="not trusted"):
        refuse_untrusted(d)


def test_a_sticky_parent_is_accepted_but_not_as_the_cache_dir_itself(tmp_path):
    from torch_flydsl.runtime.trust import untrusted

    shared = tmp_path / "tmp_like"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "mine").mkdir(mode=0o700)
    assert untrusted(shared / "mine") is None
    assert untrusted(shared) == f"{shared} is writable by its group and others (mode 1777)"


def test_another_owner_is_refused(tmp_path):
    from torch_flydsl.runtime.trust import untrusted

    f = tmp_path / "f"
    f.write_text("x")
    os.chown(f, NOBODY, NOBODY)
    why = untrusted(f)
    assert why.startswith(f"{f} is owned by ") and "not by this user" in why, why


def test_verify_file_checks_size_then_hash(tmp_path):
    import hashlib

    from torch_flydsl.runtime.trust import verify_file

    f = tmp_path / "k.pkl"
    f.write_bytes(b"abcd")
    good = hashlib.sha256(b"abcd").hexdigest()
    assert verify_file(f, 4, good) is None
    assert "has 4 bytes, the manifest recorded 5" in verify_file(f, 5, good)
    f.write_bytes(b"abce")
    assert "SHA-256" in verify_file(f, 4, good) and "differs" in verify_file(f, 4, good)
    assert verify_file(tmp_path / "gone", 4, good) == f"{tmp_path / 'gone'} is missing"
