"""Plugin knobs. All are environment variables, read at use time (never cached at import).

Inductor raises on unknown config keys, so the plugin cannot add ``torch._inductor.config``
entries; ``TORCH_FLYDSL_*`` variables work the same from code, a shell or a vLLM launcher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BACKEND_NAME = "FLYDSL"

EXECUTORS = ("device", "emulator", "reference-standin")
BREADTHS = ("baseline", "curated", "exhaustive")
INTREE_POLICIES = ("defer", "plugin")


def _flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


def _choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        raise ValueError(f"{name}={raw!r}: expected one of {', '.join(allowed)}")
    return raw


@dataclass(frozen=True)
class Knob:
    env: str
    default: str
    meaning: str


# The one table of knobs; README's configuration table is generated from / checked against it.
KNOBS = (
    Knob("TORCH_FLYDSL_DISABLE", "0", "1 turns the whole plugin off: the entry point does nothing at `import torch`."),
    Knob(
        "TORCH_FLYDSL_AUTOTUNE",
        "0",
        "FlyDSL GEMM configs offered per node: 0 = one baseline config; 1 = curated list, or the "
        "exhaustive space when TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_SEARCH_SPACE=EXHAUSTIVE; or name "
        "baseline|curated|exhaustive directly.",
    ),
    Knob(
        "TORCH_FLYDSL_INTREE_POLICY",
        "defer",
        "When torch ships its own FlyDSL backend: defer = offer no plugin GEMM choices; plugin = offer them too.",
    ),
    Knob(
        "TORCH_FLYDSL_EXECUTOR",
        "device",
        "device = launch on a gfx950 GPU; emulator = run kernels on CPU tensors through the gfx950 "
        "emulator (tests, demo); reference-standin = plumbing tests only: a float64 reference stands in for the kernel.",
    ),
    Knob("TORCH_FLYDSL_LOG", "", "debug|info: print the torch_flydsl logger (offers and declines per GEMM node) to stderr."),
)


def disabled() -> bool:
    return _flag("TORCH_FLYDSL_DISABLE")


def executor() -> str:
    return _choice("TORCH_FLYDSL_EXECUTOR", EXECUTORS, "device")


def intree_policy() -> str:
    return _choice("TORCH_FLYDSL_INTREE_POLICY", INTREE_POLICIES, "defer")


def autotune_breadth(inductor_search_space: str = "DEFAULT") -> str:
    raw = os.environ.get("TORCH_FLYDSL_AUTOTUNE", "").strip().lower()
    if raw in BREADTHS:
        return raw
    if raw in ("", "0", "false", "off", "no"):
        return "baseline"
    if raw in ("1", "true", "on", "yes"):
        return "exhaustive" if inductor_search_space.upper() == "EXHAUSTIVE" else "curated"
    raise ValueError(f"TORCH_FLYDSL_AUTOTUNE={raw!r}: expected 0, 1 or one of {', '.join(BREADTHS)}")


def backends_include_flydsl(backends: str) -> bool:
    """Same rule Inductor applies to its own names: comma-separated, case-insensitive."""
    return BACKEND_NAME in [x.strip().upper() for x in backends.split(",")]


def cache_key_knobs() -> tuple[tuple[str, str], ...]:
    """The knobs that change generated code, as set now: they belong in the FX-graph cache key."""
    names = ("TORCH_FLYDSL_AUTOTUNE", "TORCH_FLYDSL_EXECUTOR", "TORCH_FLYDSL_INTREE_POLICY")
    return tuple((n, os.environ.get(n, "").strip().lower()) for n in names)
