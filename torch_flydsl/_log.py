"""The ``torch_flydsl`` logger. Silent unless the user configures logging or sets TORCH_FLYDSL_LOG."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("torch_flydsl")


def configure_from_env() -> None:
    level = os.environ.get("TORCH_FLYDSL_LOG", "").strip().upper()
    if not level or any(getattr(h, "_torch_flydsl", False) for h in log.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[torch_flydsl] %(levelname)s %(message)s"))
    handler._torch_flydsl = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(getattr(logging, level, logging.INFO))
