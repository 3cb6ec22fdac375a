"""torch-flydsl's entry points, kept outside the ``torch_flydsl`` package on purpose.

``torch.backends`` entry points run inside ``import torch``, and torch turns any exception
from loading or calling one into a failed ``import torch`` for the whole environment. This
module is the part that must survive anything: it imports only the standard library, reads
``TORCH_FLYDSL_DISABLE`` before importing anything of the plugin, and swallows every error
from the package itself (a broken ``torch_flydsl/__init__``, a missing file, package files
removed while the dist-info remains). Being a top-level module, it is still importable when
the ``torch_flydsl/`` directory is broken or gone.

It also holds the plugin's one parser for boolean environment variables, so that the kill
switch here and ``torch_flydsl.config`` can never read the same value two ways.
"""

from __future__ import annotations

import logging
import os

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_warned: set = set()


def warn_once(key: str, message: str) -> None:
    """A warning on the ``torch_flydsl`` logger, once per distinct key per process (knobs are
    read at every use). With no logging configured, Python prints it to stderr."""
    if key in _warned:
        return
    _warned.add(key)
    try:
        logging.getLogger("torch_flydsl").warning("%s", message)
    except Exception:
        pass


def parse_flag(name: str, raw, default: bool) -> bool:
    """``raw`` as a boolean: 1/0, true/false, yes/no, on/off, any case, surrounding blanks
    ignored; unset or blank gives ``default``; anything else warns once and gives ``default``."""
    if raw is None or raw.strip() == "":
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    warn_once(
        f"{name}={raw}",
        f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off); using the default "
        f"{'1' if default else '0'}",
    )
    return default


def env_flag(name: str, default: bool = False) -> bool:
    return parse_flag(name, os.environ.get(name), default)


def disabled_by_env() -> bool:
    """The kill switch, readable without importing the package."""
    return env_flag("TORCH_FLYDSL_DISABLE", False)


def _enable_package() -> None:
    if disabled_by_env():
        return
    try:
        from torch_flydsl._autoload import enable

        enable()
    except BaseException as e:  # noqa: BLE001 - nothing may escape into ``import torch``
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        warn_once(
            "enable-failed",
            f"torch_flydsl disabled itself at import: {type(e).__name__}: {e} "
            "(TORCH_FLYDSL_DISABLE=1 silences this; `python -m torch_flydsl doctor` says more)",
        )


def autoload() -> None:
    """``torch.backends`` entry point (runs inside ``import torch``)."""
    try:
        _enable_package()
    except Exception:
        pass


def vllm_register() -> None:
    """``vllm.general_plugins`` entry point: vLLM calls it in every process, maybe twice.
    It adds the plugin's fingerprint to vLLM's compile-cache key and the plugin's variables to
    those vLLM copies to its Ray actors and, with ``TORCH_FLYDSL_VLLM`` on, arms the re-routes of
    vLLM's layers (``torch_flydsl.integrations.vllm``); any failure there is logged, never raised."""
    autoload()
    try:
        if disabled_by_env():
            return
        from torch_flydsl.integrations.vllm import install, install_fingerprint, install_ray_env

        install_fingerprint()  # vLLM's compile-cache key follows the plugin, re-route or not
        install_ray_env()  # TORCH_FLYDSL_* reach vLLM's Ray actors, re-route or not
        if env_flag("TORCH_FLYDSL_VLLM", False):
            install()
    except BaseException as e:  # noqa: BLE001 - a plugin must never stop vLLM
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        warn_once(
            "vllm-install-failed",
            f"torch_flydsl: the vLLM hooks (compile-cache fingerprint, Ray env copy, TORCH_FLYDSL_VLLM re-route) were not "
            f"installed: {type(e).__name__}: {e} (vLLM's own kernels serve every call)",
        )
