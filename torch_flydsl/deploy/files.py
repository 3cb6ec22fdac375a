"""Rewriting a file safely: atomically (a reader, or a crash, never leaves half a file) and, for
files several processes merge into, under an exclusive lock around the read-modify-write.

Every file the deployment tools rewrite goes through here: the cache manifest, the dispatch
table, recorded shapes and Inductor's winners. The lock is a sibling ``<name>.lock`` file held
with ``fcntl.flock`` (released by the kernel if the holder dies), so every process that follows
this convention serialises its merges with the others.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path
from typing import Callable, Iterator, Optional, Union


def describe(e: OSError, path: Union[str, Path, None] = None) -> str:
    """``e`` in one line that names the path (``no space left on device`` said plainly)."""
    where = e.filename if e.filename is not None else path
    if e.errno == errno.ENOSPC:
        return f"{where}: no space left on device"
    reason = e.strerror or str(e)
    return f"{where}: {reason}" if where is not None else reason


def _mode_for(path: Path, mode: Optional[int]) -> Optional[int]:
    """The mode to give the new file: ``mode``, else the old file's (None: the umask decides)."""
    if mode is not None:
        return mode
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return None


def atomic_write(path: Union[str, Path], data: Union[str, bytes], mode: Optional[int] = None) -> Path:
    """Replace ``path`` with ``data``: a temp file in the same directory, fsynced, then renamed
    over it, so the file is always either the old or the new content (on a full disk too).
    ``mode``: the file's permission bits (default: the old file's, else ``0o666`` less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    body = data.encode() if isinstance(data, str) else data
    wanted = _mode_for(path, mode)
    # Created private, then given its mode: no moment where the temp is wider open than asked.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if wanted is None else 0o600)
    try:
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
            if wanted is not None:
                os.fchmod(fd, wanted)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (a power cut after it must not bring the old name back)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def lock_path(path: Union[str, Path]) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Union[str, Path], mode: int = 0o600) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (its sibling ``<name>.lock``) for a read-modify-write."""
    import fcntl

    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def update(path: Union[str, Path], change: Callable[[], Union[str, bytes]], mode: Optional[int] = None) -> Path:
    """Under ``path``'s lock, write what ``change()`` returns (it reads the file as it is now and
    merges into it): concurrent updates of one file each see the other's result, none is lost."""
    with locked(path, 0o600 if mode is None else mode):
        return atomic_write(path, change(), mode)
