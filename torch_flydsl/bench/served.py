"""Who served an eager call, read from the plugin's own per-call log line: the device benches
confirm that the FlyDSL column really ran FlyDSL (a declined or failed call runs PyTorch's
kernel and would be timed under FlyDSL's name otherwise)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from .._log import log


class _Lines(logging.Handler):
    def __init__(self, prefix: str):
        super().__init__(logging.DEBUG)
        self.prefix = prefix
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(self.prefix):
            self.lines.append(message[len(self.prefix):])


def served_by(fn: Callable[[], Any], target: str) -> tuple[Any, str]:
    """``fn()``'s result and who served its ``aten.<target>`` call, as the eager glue logs it
    (``FlyDSL <config>`` or ``PyTorch's kernel: <reason>``; the last such call when several),
    or ``no aten.<target> call`` when none reached the plugin's override."""
    handler = _Lines(f"aten.{target}: ")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        out = fn()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return out, handler.lines[-1] if handler.lines else f"no aten.{target} call"


def flydsl_config(served: str) -> str:
    """The config key of a ``served_by`` answer that names FlyDSL, else empty."""
    return served[len("FlyDSL "):] if served.startswith("FlyDSL ") else ""
