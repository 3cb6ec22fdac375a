"""``manifest.json``: the kernels a deployment cache directory holds, and how they were built.

::

    {"format": "torch-flydsl-precompiled", "version": 2, "arch": "gfx950",
     "toolchain": "<FlyDSL's toolchain key>", "flydsl": "0.5.0", "plugin": "0.1.0",
     "kernels": {"dense_gemm-5/m128n128k32_w2x2_s4_g0/bfloat16/nt/bias0/ktail0":
                   {"file": "flydsl/launch/<key>.pkl", "size": 81234, "sha256": "<hex>",
                    "seconds": 3.1, "shapes": ["mm bfloat16 nt 64x4096x4096"],
                    "native": {"file": "native/<sha256>.hsaco", "size": 40960, "sha256": "<sha256>"}}}}

The binaries themselves are FlyDSL's disk cache under ``<dir>/flydsl`` (``FLYDSL_RUNTIME_CACHE_DIR``
semantics): a device process loads them by FlyDSL's own key, which covers the traced kernel, the
FlyDSL build and the ROCm device bitcode. ``toolchain`` is that key's toolchain part as the
precompiling machine computed it: a deployment whose FlyDSL or ROCm bitcode differs would find
none of the files, and run-only mode says so instead of pretending.

``size`` and ``sha256`` are each binary's as precompile wrote it: a binary is reported present
(``holds``) only when it still matches them and nobody else could have written it
(``runtime.trust``), since FlyDSL's binaries are pickles and loading one runs its code.
Version 1 manifests (no sizes, no hashes) are refused with that reason; precompile rebuilds them.

``native`` (optional, absent in manifests written before precompile exported them, which still
load) names the kernel's gfx950 code object for the C++ launcher (``torch_flydsl.native``),
listed in ``<dir>/native/index.tsv`` under the same kernel id.

Writers update the file under its lock, re-reading it first (``update``): concurrent precompile
runs each add their kernels and lose none of the others'.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

FORMAT = "torch-flydsl-precompiled"
VERSION = 2
FILE_NAME = "manifest.json"
BINARIES = "flydsl"  # FlyDSL's disk cache, under the cache directory
NATIVE = "native"  # the native launcher's code objects and index
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest file that cannot be used; the message names the file and what is wrong."""


@dataclass
class KernelEntry:
    file: str  # relative to the cache directory, under flydsl/
    size: int
    sha256: str
    seconds: float = 0.0
    shapes: list = field(default_factory=list)  # labels of the spec shapes it serves
    native: Optional["NativeFile"] = None  # its code object for the native launcher, if exported


@dataclass
class NativeFile:
    file: str  # relative to the cache directory: native/<sha256>.hsaco
    size: int
    sha256: str


@dataclass
class Manifest:
    directory: Path
    arch: str = "gfx950"
    toolchain: Optional[str] = None
    flydsl: Optional[str] = None
    plugin: Optional[str] = None
    kernels: dict = field(default_factory=dict)  # kernel id -> KernelEntry

    @property
    def path(self) -> Path:
        return self.directory / FILE_NAME

    def binary(self, unit: str) -> Path:
        return self.directory / self.kernels[unit].file

    def why_not_held(self, unit: str) -> Optional[str]:
        """Why ``unit``'s binary cannot be used (None: listed, on disk, intact and trusted)."""
        from ..runtime.trust import verify_file

        entry = self.kernels.get(unit)
        if entry is None:
            return f"kernel {unit} is not in {self.path}"
        return verify_file(self.directory / entry.file, entry.size, entry.sha256)

    def why_native_not_held(self, unit: str) -> Optional[str]:
        """Why ``unit`` has no usable native code object (None: listed, intact, trusted, indexed)."""
        from ..runtime.trust import verify_file

        entry = self.kernels.get(unit)
        if entry is None or entry.native is None:
            return f"kernel {unit} has no native code object in {self.path}"
        why = verify_file(self.directory / entry.native.file, entry.native.size, entry.native.sha256)
        if why:
            return why
        from .native_index import index_lines

        if unit not in index_lines(self.directory):
            return f"kernel {unit} is not in {self.directory / NATIVE / 'index.tsv'}"
        return None

    def holds(self, unit: str) -> bool:
        return self.why_not_held(unit) is None

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "arch": self.arch, "toolchain": self.toolchain,
                "flydsl": self.flydsl, "plugin": self.plugin,
                "kernels": {k: _entry_json(v) for k, v in sorted(self.kernels.items())}}

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"


def _entry_json(entry: KernelEntry) -> dict:
    doc = asdict(entry)
    if entry.native is None:
        del doc["native"]  # as manifests without native code objects always read
    return doc


def _checked_file(where: str, raw: dict, under: str) -> tuple:
    file, size, sha = raw.get("file"), raw.get("size"), raw.get("sha256")
    parts = PurePosixPath(file).parts if isinstance(file, str) else ()
    if not isinstance(file, str) or len(parts) < 2 or parts[0] != under or ".." in parts \
            or PurePosixPath(file).is_absolute():
        raise ManifestError(f"{where}: \"file\" must be a path under {under}/, got {file!r}")
    if not (isinstance(size, int) and not isinstance(size, bool) and size > 0):
        raise ManifestError(f"{where}: \"size\" must be a positive integer, got {size!r}")
    if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        raise ManifestError(f"{where}: \"sha256\" must be 64 lowercase hex digits, got {sha!r}")
    return file, size, sha


def _native(where: str, raw) -> Optional[NativeFile]:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: \"native\" must be an object, got {type(raw).__name__}")
    return NativeFile(*_checked_file(f"{where}.native", raw, NATIVE))


def _kernel(path: Path, uid, raw) -> KernelEntry:
    where = f"{path}: kernels[{uid!r}]"
    if not isinstance(raw, dict):
        raise ManifestError(f"{where} must be an object, got {type(raw).__name__}")
    file, size, sha = _checked_file(where, raw, BINARIES)
    seconds, shapes = raw.get("seconds", 0.0), raw.get("shapes", [])
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise ManifestError(f"{where}: \"seconds\" must be a number, got {seconds!r}")
    if not (isinstance(shapes, list) and all(isinstance(s, str) for s in shapes)):
        raise ManifestError(f"{where}: \"shapes\" must be a list of strings")
    return KernelEntry(file, size, sha, float(seconds), list(shapes), _native(where, raw.get("native")))


def parse(doc, path: Path) -> Manifest:
    """The manifest ``doc`` (parsed JSON) of ``path``; ``ManifestError`` says what is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a torch-flydsl manifest (its \"format\" must be {FORMAT!r})")
    version = doc.get("version")
    if version != VERSION:
        old = " (written before manifests recorded sizes and hashes)" if version == 1 else ""
        raise ManifestError(f"{path}: manifest version {version!r}{old}; this torch_flydsl reads version {VERSION}")
    strings = {name: doc.get(name) for name in ("arch", "toolchain", "flydsl", "plugin")}
    for name, value in strings.items():
        if value is not None and not isinstance(value, str):
            raise ManifestError(f"{path}: \"{name}\" must be a string, got {value!r}")
    kernels = doc.get("kernels")
    if not isinstance(kernels, dict):
        raise ManifestError(f"{path}: \"kernels\" must map kernel ids to objects, got {type(kernels).__name__}")
    return Manifest(path.parent, strings["arch"] or "gfx950", strings["toolchain"], strings["flydsl"],
                    strings["plugin"], {uid: _kernel(path, uid, raw) for uid, raw in kernels.items()})


def read(directory: Path) -> Manifest:
    """The manifest of ``directory`` (empty when there is none); ``ManifestError`` for a file
    that is not one (unreadable, not JSON, wrong types, another version)."""
    path = Path(directory) / FILE_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Manifest(Path(directory))
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: unreadable ({type(e).__name__}: {e})") from e
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not JSON ({e}){' (empty)' if not text.strip() else ''}") from e
    return parse(doc, path)


def update(directory: Path, change: Callable[[Manifest], None], mode: Optional[int] = None) -> Manifest:
    """Re-read the manifest under its lock, apply ``change`` and write it atomically: the way every
    writer saves, so concurrent writers each keep the others' kernels. A file that is not a
    manifest is replaced (the caller warned when it first read it)."""
    from .files import update as locked_update

    result: list = []

    def rewrite() -> str:
        try:
            man = read(directory)
        except ManifestError:
            man = Manifest(Path(directory))
        change(man)
        result.append(man)
        return man.text()

    locked_update(Path(directory) / FILE_NAME, rewrite, mode)
    return result[0]


_cached: dict = {}  # (directory, file version) -> Manifest
_lock = threading.Lock()


def current(directory: Path) -> Manifest:
    """``read(directory)``, re-read only when the file changed (offers ask once per config)."""
    path = Path(directory) / FILE_NAME
    try:
        st = path.stat()
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    key = (str(directory), stamp)
    with _lock:
        hit = _cached.get(key)
        if hit is None:
            hit = read(directory)
            _cached.clear()
            _cached[key] = hit
        return hit
