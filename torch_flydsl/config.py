"""Plugin knobs. All are environment variables, read at use time (never cached at import).

Inductor raises on unknown config keys, so the plugin cannot add ``torch._inductor.config``
entries; ``TORCH_FLYDSL_*`` variables work the same from code, a shell or a vLLM launcher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch_flydsl_boot import FALSE_WORDS, TRUE_WORDS, env_flag, warn_once

BACKEND_NAME = "FLYDSL"

EXECUTORS = ("device", "emulator", "reference-standin")
BREADTHS = ("baseline", "curated", "exhaustive")
INTREE_POLICIES = ("defer", "plugin")


def _bad_value(name: str, raw: str, expected: str, default: str) -> None:
    """A knob with a value we cannot read keeps its default: a typo must never break a run.
    Said once per process on the torch_flydsl logger."""
    warn_once(f"{name}={raw}", f"{name}={raw!r}: expected {expected}; using the default {default!r}")


def _choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name, "")
    word = raw.strip().lower()
    if not word:
        return default
    if word not in allowed:
        _bad_value(name, raw, "one of " + ", ".join(a for a in allowed if a), default or "(unset)")
        return default
    return word


@dataclass(frozen=True)
class Knob:
    env: str
    default: str
    meaning: str


# The one table of knobs; test_config checks the table in docs/configuration.md against it.
KNOBS = (
    Knob("TORCH_FLYDSL_DISABLE", "0", "1 (or true/yes/on) turns the whole plugin off: the entry point does nothing at `import torch`."),
    Knob(
        "TORCH_FLYDSL_AUTOTUNE",
        "0",
        "FlyDSL GEMM configs offered per node: 0 = one baseline config; 1 = curated list, or the "
        "exhaustive space when TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_SEARCH_SPACE=EXHAUSTIVE; or name "
        "baseline|curated|exhaustive directly. Unset: torch 2.15's switch decides "
        "(config.flydsl_enable_autotuning, or FLYDSL_ENABLE_AUTOTUNING=1 on any torch, reads as 1).",
    ),
    Knob(
        "TORCH_FLYDSL_INTREE_POLICY",
        "defer",
        "When torch ships its own FlyDSL backend: defer = leave an op to it where it would really serve "
        "it (its flydsl gate passes on a gfx950), serve everything else; plugin = offer the plugin's kernels too.",
    ),
    Knob(
        "TORCH_FLYDSL_EXECUTOR",
        "device",
        "device = launch on a gfx950 GPU; emulator = run kernels on CPU tensors through the gfx950 "
        "emulator (tests, demo); reference-standin = plumbing tests only: a float64 reference stands in for the kernel.",
    ),
    Knob("TORCH_FLYDSL_LOG", "", "debug|info|warning|error: print the torch_flydsl logger (offers and declines per GEMM node; at debug one line per eager call: FlyDSL <config> or the decline reason) to stderr at that level."),
    Knob("TORCH_FLYDSL_EAGER", "1", "0 (or false/no/off) leaves the eager overrides (rms_norm, MXFP8 grouped GEMM, ...) unregistered: read at start-up; torch_flydsl.eager_enabled() reports it, torch_flydsl.disabled() switches them off per thread at run time."),
    Knob("TORCH_FLYDSL_CACHE_DIR", "", "Directory of the plugin's deployment cache: `precompile` writes gfx950 binaries (flydsl/) and their manifest.json there, and a run reads them (and dispatch_table.json) from there. Unset: under Inductor's cache dir (TORCHINDUCTOR_CACHE_DIR)/torch_flydsl."),
    Knob("TORCH_FLYDSL_RUN_ONLY", "0", "1 (or true/yes/on): never compile a FlyDSL kernel at run time. Inductor offers only configs the cache's manifest.json lists; an eager or vLLM call whose kernel is missing keeps PyTorch's (vLLM's) path, with the reason at debug level."),
    Knob("TORCH_FLYDSL_COMPILE_TIMEOUT", "600", "Seconds one FlyDSL compile may take in its worker process (every compile the plugin starts runs in one, so an LLVM abort cannot kill yours); past it the worker is killed and that kernel is declined with the reason."),
    Knob("TORCH_FLYDSL_RECORD_SHAPES", "", "FILE: record every GEMM shape that reaches the plugin (Inductor nodes offered FlyDSL, vLLM re-route calls) and merge them into FILE, a `precompile` shapes spec, at process exit."),
    Knob("TORCH_FLYDSL_RECORD_WINNERS", "", "FILE: every mm/addmm Inductor autotunes in this process where a FlyDSL config beats the fastest other choice by more than 1% becomes a dispatch-table entry (source inductor); a tie, a loss or a sub-roofline time writes none and drops the shape's old entries; merged into FILE as found and at exit."),
    Knob("TORCH_FLYDSL_DISPATCH_TABLE", "", "Path of a per-shape dispatch table (JSON; see docs/deployment.md, \"Dispatch tables\") that picks the FlyDSL config for callers without Inductor (the vLLM re-route). Unset: $TORCH_FLYDSL_CACHE_DIR/dispatch_table.json when that file exists."),
    Knob(
        "TORCH_FLYDSL_VLLM",
        "0",
        "1 (or true/yes/on): in vLLM on ROCm (VLLM_PLUGINS must let torch_flydsl load), the unquantized "
        "linear layers whose shape TORCH_FLYDSL_DISPATCH_TABLE names run FlyDSL kernels; every other call "
        "keeps vLLM's kernel choice. Also adds the plugin's fingerprint to vLLM's compile-cache key.",
    ),
    Knob("TORCH_FLYDSL_VLLM_MXFP4", "0", "1 (or true/yes/on), with TORCH_FLYDSL_VLLM=1: MXFP4 (W4A4) linear layers whose "
         "[N, K] the dispatch table names run the MX scaled GEMM too (opt-in: the plugin quantizes their activations "
         "and may keep a copy of the checkpoint's weights beside AITER's pre-shuffled one)."),
    Knob("TORCH_FLYDSL_NATIVE", "auto", "The C++ launcher (docs/native.md): auto loads a library that `python -m "
         "torch_flydsl native build` left for this torch and these sources, on a ROCm torch only; 1 loads it on any "
         "torch; 0 never (the Python launcher serves). Read at import torch."),
    Knob("TORCH_FLYDSL_HIP_LIBRARY", "", "The HIP runtime library the C++ launcher opens with dlopen (unset: "
         "libamdhip64.so); the tests point it at their stand-in HIP library."),
)


def disabled() -> bool:
    return env_flag("TORCH_FLYDSL_DISABLE")


def vllm_mxfp4() -> bool:
    """``TORCH_FLYDSL_VLLM_MXFP4``: the opt-in MXFP4 linear re-route (default off)."""
    return env_flag("TORCH_FLYDSL_VLLM_MXFP4")


def eager_on() -> bool:
    """``TORCH_FLYDSL_EAGER``: register the eager overrides (default on)."""
    return env_flag("TORCH_FLYDSL_EAGER", True)


def run_only() -> bool:
    """``TORCH_FLYDSL_RUN_ONLY``: never compile at run time (default off)."""
    return env_flag("TORCH_FLYDSL_RUN_ONLY", False)


COMPILE_TIMEOUT_DEFAULT = 600.0


def compile_timeout() -> float:
    """``TORCH_FLYDSL_COMPILE_TIMEOUT``: seconds per compile in a worker (a positive number)."""
    name = "TORCH_FLYDSL_COMPILE_TIMEOUT"
    raw = os.environ.get(name, "")
    if not raw.strip():
        return COMPILE_TIMEOUT_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        _bad_value(name, raw, "a positive number of seconds", f"{COMPILE_TIMEOUT_DEFAULT:g}")
        return COMPILE_TIMEOUT_DEFAULT
    return value


def executor() -> str:
    return _choice("TORCH_FLYDSL_EXECUTOR", EXECUTORS, "device")


def intree_policy() -> str:
    return _choice("TORCH_FLYDSL_INTREE_POLICY", INTREE_POLICIES, "defer")


_NATIVE_WORDS = {"true": "1", "on": "1", "yes": "1", "false": "0", "off": "0", "no": "0"}


def native_setting() -> str:
    """``TORCH_FLYDSL_NATIVE``: ``auto`` (default), ``1`` or ``0`` (true/on/yes and false/off/no
    spell the last two); anything else warns once and means ``auto``."""
    raw = os.environ.get("TORCH_FLYDSL_NATIVE", "")
    word = raw.strip().lower()
    word = _NATIVE_WORDS.get(word, word)
    if not word:
        return "auto"
    if word not in ("auto", "1", "0"):
        _bad_value("TORCH_FLYDSL_NATIVE", raw, "one of auto, 1, 0", "auto")
        return "auto"
    return word


SEEDS_AUTOTUNE_ENV = "FLYDSL_ENABLE_AUTOTUNING"  # torch 2.15's Inductor reads it into the key below
SEEDS_AUTOTUNE_KEY = "flydsl_enable_autotuning"  # torch._inductor.config's switch (torch 2.15+)


def _autotune_setting() -> str:
    """``TORCH_FLYDSL_AUTOTUNE`` parsed: a breadth name, or "on"/"off" (any boolean spelling);
    a bad value warns once and reads as "off". Unset, the seeds' switch decides: "on" where
    ``torch._inductor.config.flydsl_enable_autotuning`` is True (torch 2.15+) or, on any torch,
    ``FLYDSL_ENABLE_AUTOTUNING=1``; else "off"."""
    name = "TORCH_FLYDSL_AUTOTUNE"
    raw = os.environ.get(name, "")
    word = raw.strip().lower()
    if not word:
        return "on" if seeds_autotune_switch() else "off"
    if word in BREADTHS:
        return word
    if word not in TRUE_WORDS + FALSE_WORDS:
        _bad_value(name, raw, "0, 1 (or another boolean) or one of " + ", ".join(BREADTHS), "0")
        return "off"
    return "on" if env_flag(name, False) else "off"


def seeds_autotune_switch() -> bool:
    """The switch torch 2.15's in-tree FlyDSL backend documents: Inductor's
    ``config.flydsl_enable_autotuning`` where this torch has it (its default reads
    ``FLYDSL_ENABLE_AUTOTUNING``), else ``FLYDSL_ENABLE_AUTOTUNING=1`` as torch 2.15 spells it.
    Inductor's config is read only if something imported it already."""
    import sys

    inductor = sys.modules.get("torch._inductor.config")
    value = getattr(inductor, SEEDS_AUTOTUNE_KEY, None) if inductor is not None else None
    if isinstance(value, bool):
        return value
    return os.environ.get(SEEDS_AUTOTUNE_ENV, "0") == "1"


def autotune_breadth(inductor_search_space: str = "DEFAULT") -> str:
    """The search space: a breadth by name, or off = baseline, on = curated (exhaustive under
    Inductor's EXHAUSTIVE search space)."""
    setting = _autotune_setting()
    if setting in BREADTHS:
        return setting
    if setting == "off":
        return "baseline"
    return "exhaustive" if inductor_search_space.upper() == "EXHAUSTIVE" else "curated"


def backends_include_flydsl(backends: str) -> bool:
    """Same rule Inductor applies to its own names: comma-separated, case-insensitive."""
    return BACKEND_NAME in [x.strip().upper() for x in backends.split(",")]


def cache_key_knobs() -> tuple[tuple[str, str], ...]:
    """The knobs that change generated code, as they are read now (parsed: spellings that mean
    the same, or a bad value that falls back to the default, give the same key)."""
    return (
        ("TORCH_FLYDSL_AUTOTUNE", _autotune_setting()),
        ("TORCH_FLYDSL_EXECUTOR", executor()),
        ("TORCH_FLYDSL_INTREE_POLICY", intree_policy()),
        ("TORCH_FLYDSL_RUN_ONLY", str(int(run_only()))),
    )
