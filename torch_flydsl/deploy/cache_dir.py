"""The deployment cache directory ``precompile`` fills: made, checked and given its permissions
before anything is built, so an unusable one is one line (exit 2), not a traceback at the end.

Private (the default): directories 0700, files 0600, as every cache of ours: the binaries are
pickles, loaded and run by whoever reads them. ``--shared``: directories 0750, files 0640
(FlyDSL's binaries included, re-moded after FlyDSL writes them), for a serving user in the
directory's group; the setgid bit of a directory is kept, so new files take its group.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from . import manifest as mf
from .files import describe, lock_path


@dataclass(frozen=True)
class Permissions:
    dirs: int
    files: int


PRIVATE = Permissions(0o700, 0o600)
SHARED = Permissions(0o750, 0o640)


class CacheDirError(Exception):
    """The cache directory cannot be used; the message names it and says why."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"cannot use the cache directory {path}: {reason}")
        self.path = path


def _make(directory: Path, perms: Permissions, top: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=perms.dirs)
    except FileExistsError:
        raise CacheDirError(top, f"{directory} is a file, not a directory") from None
    except NotADirectoryError:
        raise CacheDirError(top, f"a parent of {directory} is a file, not a directory") from None
    except OSError as e:
        raise CacheDirError(top, describe(e, directory)) from None


def chmod_owned(path: Path, perms: Permissions) -> None:
    """Give ``path`` its mode (a directory keeps its setgid bit) when this user owns it."""
    try:
        st = os.lstat(path)
        if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
            return
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, perms.dirs | (st.st_mode & stat.S_ISGID))
        else:
            os.chmod(path, perms.files)
    except OSError:
        pass  # a file FlyDSL is replacing right now: the final pass (chmod_tree) gets its successor


def chmod_tree(root: Path, perms: Permissions) -> None:
    """``chmod_owned`` for ``root`` and everything under it (FlyDSL's files after a build)."""
    chmod_owned(root, perms)
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            chmod_owned(Path(base) / name, perms)


def _probe_writable(directory: Path, top: Path) -> None:
    """Create and remove a file: the only test that is honest for root on a read-only mount."""
    probe = directory / f".probe.{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise CacheDirError(top, f"cannot write there ({describe(e, directory)})") from None


def prepare(cache_dir: Path, perms: Permissions) -> Path:
    """Make ``cache_dir`` and its ``flydsl/`` (FlyDSL's disk cache) usable; returns the latter.
    ``CacheDirError``: a file in the way, a read-only or full filesystem, no permission, or a
    directory others could write (what FlyDSL would then load is not ours)."""
    from ..runtime.trust import untrusted

    flydsl_dir = cache_dir / mf.BINARIES
    for d in (cache_dir, flydsl_dir):
        _make(d, perms, cache_dir)
        if perms == SHARED:
            chmod_owned(d, perms)
        why = untrusted(d)
        if why:
            raise CacheDirError(cache_dir, f"{why}: anyone who can write there could plant code that every process "
                                           "loading the cache runs (chmod go-w it, or choose another directory)")
        _probe_writable(d, cache_dir)
    lock = lock_path(cache_dir / mf.FILE_NAME)
    try:
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT, perms.files))
    except OSError as e:
        raise CacheDirError(cache_dir, describe(e, lock)) from None
    return flydsl_dir
