"""Which torch releases the Inductor glue was tested on, and Inductor API names that moved between
them. (The plugin's version fingerprint, in every cache key: ``torch_flydsl.fingerprint``.)"""

from __future__ import annotations

from typing import Optional

# The newest torch release whose Inductor seams the glue tests ran on
# (scripts/test_torch_versions.sh). Newer ones still get the glue; doctor says "untested".
NEWEST_TESTED_TORCH = (2, 15)


def untested_torch() -> Optional[str]:
    """A sentence when this torch is newer than the newest one tested, else None."""
    import torch

    from ..runtime.probe import _parse_version

    have = _parse_version(torch.__version__)[:2]
    if have > NEWEST_TESTED_TORCH:
        newest = ".".join(map(str, NEWEST_TESTED_TORCH))
        return f"torch {torch.__version__} is newer than the newest release torch_flydsl was tested on ({newest})"
    return None


def size_hint(sizevars, expr) -> int:
    """Inductor's size hint for ``expr`` (the value autotuning times): ``optimization_hint`` on
    torch 2.11+, ``size_hint`` where a later release drops that name."""
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    return int(hint(expr))
