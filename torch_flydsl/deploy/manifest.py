"""``manifest.json``: the kernels a deployment cache directory holds, and how they were built.

::

    {"format": "torch-flydsl-precompiled", "version": 1, "arch": "gfx950",
     "toolchain": "<FlyDSL's toolchain key>", "flydsl": "0.5.0", "plugin": "0.1.0",
     "kernels": {"dense_gemm-5/m128n128k32_w2x2_s4_g0/bfloat16/nt/bias0/ktail0":
                   {"file": "flydsl/launch/<key>.pkl", "seconds": 3.1, "shapes": ["mm bfloat16 nt 64x4096x4096"]}}}

The binaries themselves are FlyDSL's disk cache under ``<dir>/flydsl`` (``FLYDSL_RUNTIME_CACHE_DIR``
semantics): a device process loads them by FlyDSL's own key, which covers the traced kernel, the
FlyDSL build and the ROCm device bitcode. ``toolchain`` is that key's toolchain part as the
precompiling machine computed it: a deployment whose FlyDSL or ROCm bitcode differs would find
none of the files, and run-only mode says so instead of pretending.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

FORMAT = "torch-flydsl-precompiled"
VERSION = 1
FILE_NAME = "manifest.json"


class ManifestError(ValueError):
    pass


@dataclass
class Manifest:
    directory: Path
    arch: str = "gfx950"
    toolchain: Optional[str] = None
    flydsl: Optional[str] = None
    plugin: Optional[str] = None
    kernels: dict = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.directory / FILE_NAME

    def holds(self, unit: str) -> bool:
        """The manifest lists ``unit`` and its binary is on disk."""
        entry = self.kernels.get(unit)
        return entry is not None and (self.directory / entry["file"]).is_file()

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "arch": self.arch, "toolchain": self.toolchain,
                "flydsl": self.flydsl, "plugin": self.plugin, "kernels": dict(sorted(self.kernels.items()))}

    def save(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(tmp, self.path)
        return self.path


def read(directory: Path) -> Manifest:
    """The manifest of ``directory`` (empty when there is none); ``ManifestError`` for a file
    that is not one."""
    directory = Path(directory)
    path = directory / FILE_NAME
    if not path.is_file():
        return Manifest(directory)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ManifestError(f"{path}: unreadable ({type(e).__name__}: {e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ManifestError(f"{path}: not a version-{VERSION} {FORMAT} manifest")
    kernels = doc.get("kernels")
    if not isinstance(kernels, dict) or not all(isinstance(v, dict) and isinstance(v.get("file"), str)
                                                for v in kernels.values()):
        raise ManifestError(f"{path}: \"kernels\" must map kernel ids to objects with a \"file\"")
    return Manifest(directory, doc.get("arch", "gfx950"), doc.get("toolchain"), doc.get("flydsl"), doc.get("plugin"),
                    kernels)


_cached: dict = {}  # (directory, mtime_ns) -> Manifest
_lock = threading.Lock()


def current(directory: Path) -> Manifest:
    """``read(directory)``, re-read only when the file changed (offers ask once per config)."""
    path = Path(directory) / FILE_NAME
    try:
        stamp = path.stat().st_mtime_ns
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
