"""Whether the installed ``torch.backends`` entry point can load: stdlib only, no torch.

torch loads every ``torch.backends`` entry point inside ``import torch`` and turns a failure to
import one into a failed ``import torch``. Our entry point's module (``torch_flydsl_boot``)
catches everything once it runs, but nothing of ours runs when the module itself cannot be
found: an editable install (``pip install -e``) whose checkout was moved or deleted points at
a file that is gone, and ``import torch`` then fails in every process of that environment.
That case cannot be caught from inside the plugin; ``doctor`` finds it (this module), and
``python -m torch_flydsl`` checks it before importing torch, so that the doctor can still run
and say how out: ``pip install -e <checkout>`` again, ``pip uninstall torch-flydsl``, or
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

GROUP = "torch.backends"
DIST = "torch-flydsl"


@dataclass(frozen=True)
class EntryPointState:
    value: str  # "module:function"
    dist_version: str
    editable_source: Optional[str]  # the checkout an editable install points at (PEP 610)
    problem: Optional[str]  # None: the module can be imported here

    def line(self) -> str:
        where = f" (editable install of {self.editable_source})" if self.editable_source else ""
        if self.problem is None:
            return f"registered: {self.value}{where}"
        return (f"BROKEN: {self.value}{where}: {self.problem}. `import torch` fails in every process of this "
                "environment that cannot import it. Way out: `pip install -e <checkout>` again from where the "
                "checkout is now, or `pip uninstall torch-flydsl`; meanwhile TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
                "lets torch import without any backend entry point")


def _ours(ep) -> bool:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or (getattr(dist, "metadata", None) or {}).get("Name", "")
    return (name or "").lower().replace("_", "-") == DIST or ep.value.split(":")[0] == "torch_flydsl_boot"


def _direct_url(dist) -> dict:
    try:
        text = dist.read_text("direct_url.json") if dist is not None else None
        return json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}


def _editable_source(dist) -> Optional[str]:
    """The checkout of an editable install (PEP 610's ``direct_url.json``), or None. A
    checkout's own ``*.egg-info`` (found first from inside it) has none: then the installed
    dist-info of the same name says."""
    info = _direct_url(dist)
    if not info:
        for other in importlib.metadata.distributions(name=DIST):
            info = _direct_url(other)
            if info:
                break
    if not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    return unquote(url.path) if url.scheme == "file" else info.get("url")


def _problem(module: str, source: Optional[str]) -> Optional[str]:
    if source is not None and not (Path(source) / f"{module}.py").is_file():
        what = "no longer exists" if not Path(source).exists() else f"has no {module}.py"
        return (f"the editable install's checkout {source} {what} (moved or deleted): processes that do not "
                f"happen to find another {module} cannot import torch")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:  # a finder that raises
        return f"finding module {module} raised {type(e).__name__}: {e}"
    if spec is None:
        gone = source is not None and not Path(source).exists()
        return (f"module {module} cannot be found" + (f": the checkout {source} no longer exists" if gone else ""))
    origin = getattr(spec, "origin", None)
    if origin and origin not in ("built-in", "frozen") and not Path(origin).exists():
        return f"module {module} points at {origin}, which does not exist"
    return None


def states() -> list[EntryPointState]:
    """Every ``torch.backends`` entry point of this plugin that this environment would load."""
    out = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        if not _ours(ep):
            continue
        dist = getattr(ep, "dist", None)
        source = _editable_source(dist)
        out.append(EntryPointState(ep.value, getattr(dist, "version", "?"), source,
                                   _problem(ep.value.split(":")[0], source)))
    return out


def broken() -> list[EntryPointState]:
    return [s for s in states() if s.problem is not None]
