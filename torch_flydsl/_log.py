"""The ``torch_flydsl`` logger. Silent unless the user configures logging or sets TORCH_FLYDSL_LOG."""

from __future__ import annotations

import logging

log = logging.getLogger("torch_flydsl")


LEVELS = ("debug", "info", "warning", "error")


def configure_from_env() -> None:
    from .config import _choice

    level = _choice("TORCH_FLYDSL_LOG", LEVELS + ("",), "").upper()
    if not level or any(getattr(h, "_torch_flydsl", False) for h in log.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[torch_flydsl] %(levelname)s %(message)s"))
    handler._torch_flydsl = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(getattr(logging, level))
