"""Whether a cache file may be handed to FlyDSL: its binaries are pickles, so loading one runs
whatever code its writer put in it.

A file (or directory) is trusted when nobody but this user or root could have written it: the
rule ``ssh`` applies to its keys. The path is resolved (symlinks followed); it and every
directory above it up to ``/`` must be owned by this user or root and writable by neither group
nor others. A *parent* directory writable by others is accepted with the sticky bit (``/tmp``:
others cannot rename or delete what is ours there); the cache directory itself is not.

A binary the manifest lists must also be the one that was built: same size and SHA-256 as
``manifest.json`` records (``verify_file``); a hash is computed once per file version.

Stdlib only, and imported only when a cache is used.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path
from typing import Optional, Union

PathLike = Union[str, Path]


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _one(path: Path, st: os.stat_result, is_parent: bool, me: int) -> Optional[str]:
    if st.st_uid not in (me, 0):
        return f"{path} is owned by {_owner_name(st.st_uid)}, not by this user ({_owner_name(me)}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o022:
        return None
    if is_parent and stat.S_ISDIR(st.st_mode) and mode & stat.S_ISVTX:
        return None  # sticky (/tmp): others may add entries but not replace ours
    who = " and ".join(w for w, bit in (("its group", 0o020), ("others", 0o002)) if mode & bit)
    return f"{path} is writable by {who} (mode {mode:04o})"


def untrusted(path: PathLike) -> Optional[str]:
    """Why ``path`` could hold code written by someone other than this user or root (None: it
    cannot). Checks ``path`` (resolved) and each directory above it; a missing ``path`` is a reason."""
    me = os.geteuid()
    real = Path(os.path.realpath(path))
    chain = [real, *real.parents]
    for i, p in enumerate(chain):
        try:
            st = os.lstat(p)
        except OSError as e:
            return f"{p} cannot be checked ({e.strerror or e})"
        why = _one(p, st, i > 0, me)
        if why:
            return why
    return None


def refuse_untrusted(path: PathLike) -> None:
    """``PermissionError`` naming the reason when ``untrusted(path)``: what a cache reader calls
    before pointing FlyDSL at a directory (the runtime then compiles in memory instead)."""
    why = untrusted(path)
    if why:
        raise PermissionError(f"not trusted: {why}; anyone who can write there could run code in this process")


_hashes: dict = {}  # (path, inode, size, mtime_ns, ctime_ns) -> sha256 hex
_hash_lock = threading.Lock()


def sha256_of(path: PathLike) -> str:
    """The file's SHA-256 (hex), computed once per file version (inode, size, times)."""
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _hash_lock:
        hit = _hashes.get(key)
    if hit is not None:
        return hit
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    with _hash_lock:
        _hashes[key] = value
    return value


def verify_file(path: PathLike, size: int, sha256: str) -> Optional[str]:
    """Why ``path`` is not the trusted file of ``size`` bytes and SHA-256 ``sha256`` that the
    manifest records (None: it is)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"{path} is missing"
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or e})"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_size != size:
        return f"{path} has {st.st_size} bytes, the manifest recorded {size} (truncated or replaced)"
    why = untrusted(path)
    if why:
        return why
    try:
        actual = sha256_of(path)
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or e})"
    if actual != sha256:
        return f"{path}: SHA-256 {actual[:12]}... differs from the manifest's {sha256[:12]}... (corrupted or replaced)"
    return None


MANIFEST = "manifest.json"


def vouched_binaries_problem(deploy_dir: PathLike) -> Optional[str]:
    """Why FlyDSL must not load binaries from the deployment cache ``deploy_dir`` (None: every
    binary its ``manifest.json`` lists is the one that was built, or it lists none). Reads only
    the fields this needs (``kernels``: ``file``, ``size``, ``sha256``); the manifest's own
    validation is ``deploy.manifest``'s. A hash is computed once per file version."""
    import json

    path = Path(deploy_dir) / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"{path} cannot be read as a manifest ({type(e).__name__}: {e})"
    kernels = doc.get("kernels") if isinstance(doc, dict) else None
    if not isinstance(kernels, dict):
        return f"{path} is not a manifest (no \"kernels\" object)"
    for uid, entry in kernels.items():
        try:
            file, size, sha = entry["file"], int(entry["size"]), str(entry["sha256"])
        except (KeyError, TypeError, ValueError):
            return f"{path}: kernel {uid} lists no file, size and sha256"
        why = verify_file(Path(deploy_dir) / file, size, sha)
        if why:
            return f"kernel {uid}: {why}"
    return None
