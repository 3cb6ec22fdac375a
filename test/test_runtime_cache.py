"""FlyDSL's kernel cache: the user's FLYDSL_RUNTIME_CACHE_DIR wins; ours is private to the user."""

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
