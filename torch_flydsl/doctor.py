"""``python -m torch_flydsl doctor``: everything that decides whether FlyDSL kernels can run here,
the registered kernel families, and, per op family, who serves it on this install (the plugin,
torch's in-tree FlyDSL backend or PyTorch) and why; the vLLM route; and who else requires flydsl
(a package that pins it, as AITER does, must keep its flydsl: the plugin is installed without
the ``[flydsl]`` extra there); and the native launcher's state (built, loaded, HIP library, index)."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Optional

from tabulate import tabulate


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _entry_point_row() -> str:
    from .entry_point import states

    found = states()
    if not found:
        return "not registered (pip install the package)"
    return "; ".join(s.line() for s in found)


def _glue_state() -> str:
    """Install the Inductor glue as a compile would (importing Inductor's lowering) and say how it went."""
    from . import is_enabled

    if not is_enabled():
        return "not installed (plugin not active)"
    try:
        import torch._inductor.lowering  # noqa: F401  (fires the plugin's post-import hook)
    except Exception as e:
        return f"not installed: Inductor failed to import: {type(e).__name__}: {e}"
    from .inductor import install as install_mod
    from .inductor.versions import untested_torch

    if install_mod.install_error:
        return f"not installed, PyTorch left as it was: {install_mod.install_error}"
    if not install_mod._installed:
        return "not installed"
    newer = untested_torch()
    return f"installed ({newer})" if newer else "installed"


def _flydsl_requested() -> str:
    raw = os.environ.get("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS")
    if raw is None:
        return "not in the env (set TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS=ATEN,TRITON,FLYDSL or the config in code)"
    from .config import backends_include_flydsl

    return f"{'yes' if backends_include_flydsl(raw) else 'no'} (TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS={raw})"


def attention_row() -> tuple[str, str]:
    """The attention path behind F.scaled_dot_product_attention on ROCm (read from torch)."""
    from .runtime.attention import aotriton_summary

    return ("SDPA attention (AOTriton)", aotriton_summary())


def _flydsl_cache_label() -> str:
    deploy = os.environ.get("TORCH_FLYDSL_CACHE_DIR")
    if deploy:
        return f"{deploy}/flydsl (TORCH_FLYDSL_CACHE_DIR)"
    return os.environ.get("FLYDSL_RUNTIME_CACHE_DIR") or "<inductor cache dir>/torch_flydsl/flydsl_cache"


def _precompiled() -> str:
    """The deployment cache's manifest in one line (never raises): a damaged manifest, or a
    binary that is not the one recorded (size, SHA-256) or that others could have written, is
    named with what is wrong."""
    from .deploy import manifest as mf
    from .deploy.run_only import whole_cache_decline
    from .runtime.cache import deployment_dir

    try:
        man = mf.read(deployment_dir())
    except (mf.ManifestError, OSError) as e:
        return f"unreadable, none loadable: {e}"
    if not man.kernels:
        return f"none in {man.directory} (python -m torch_flydsl precompile --spec FILE)"
    refused = [why for why in map(man.why_not_held, man.kernels) if why]
    held = len(man.kernels) - len(refused)
    why = whole_cache_decline(man)
    if why is not None:
        usable = f"NOT loadable here: {why.removeprefix('TORCH_FLYDSL_RUN_ONLY=1 and ')}"
    elif refused:
        more = f" (+{len(refused) - 1} more)" if len(refused) > 1 else ""
        usable = f"{'the others loadable here; ' if held else ''}refused: {refused[0]}{more}"
    else:
        usable = "loadable here"
    return f"{held} of {len(man.kernels)} listed in {man.path} ({usable})"


def _dispatch_table() -> str:
    from . import dispatch_table as dt

    table = dt.active()
    where = dt._path_for(dt._settings())
    if where is None:
        return "none (TORCH_FLYDSL_DISPATCH_TABLE)"
    if not len(table):
        return f"{where}: 0 entries (unusable: see the warning above)"
    ops: dict[str, int] = {}
    for e in table.entries:
        ops[e.op] = ops.get(e.op, 0) + 1
    return f"{where}: {len(table)} entries (" + ", ".join(f"{n} {op}" for op, n in ops.items()) + ")"


def rows() -> list[tuple[str, str]]:
    import torch

    from . import __version__, config, is_enabled
    from .runtime import intree
    from .runtime.arch import device_arch
    from .runtime.probe import find_lld, flydsl_info, hip_runtime_present, off_reported_elsewhere

    off_reported_elsewhere()  # this report says why the plugin is off: no warning besides it
    info = flydsl_info()
    hip = hip_runtime_present()
    arch = device_arch(0) if hip else None
    lld = find_lld()
    flydsl = info.version or "not installed"
    if info.installed and not info.supported:
        flydsl += f" (unsupported: {info.reason})"
    out = [
        ("torch_flydsl", __version__),
        ("torch", torch.__version__),
        ("flydsl", flydsl),
        ("flydsl pinned by", _pinned_by_row()),
        ("triton", _version("triton")),
        ("HIP runtime", f"yes (HIP {torch.version.hip})" if hip else f"no (torch.version.hip={torch.version.hip})"),
        ("GPU arch", arch or "none detected"),
        ("FLYDSL_GPU_ARCH", os.environ.get("FLYDSL_GPU_ARCH", "(unset)")),
        ("can launch FlyDSL kernels", "yes" if hip and arch == "gfx950" and info.usable else "no: compile-only / emulator only"),
        ("ld.lld (gfx950 compile-only)", str(lld) if lld else "not found (apt-get install lld-19)"),
        ("torch.backends entry point", _entry_point_row()),
        ("plugin active in this process", "yes" if is_enabled() else "no"),
        ("Inductor glue", _glue_state()),
        ("FLYDSL requested", _flydsl_requested()),
        ("in-tree FlyDSL backend in torch", str(intree.status(*_here()))),
        ("FlyDSL kernel cache", _flydsl_cache_label()),
        ("precompiled kernels", _precompiled()),
        ("run-only mode", "on: never compiles at run time" if config.run_only() else "off"),
        ("dispatch table", _dispatch_table()),
        ("executor", config.executor()),
        ("autotune breadth", config.autotune_breadth()),
        ("in-tree policy", config.intree_policy()),
    ]
    if torch.version.hip is not None:
        out.append(attention_row())
    for knob in config.KNOBS:
        if knob.env in os.environ:
            out.append((knob.env, os.environ[knob.env]))
    return out


def _pinned_by_row() -> str:
    """Who else pins flydsl, in one line (the table below has each requirement)."""
    from .runtime.probe import flydsl_requirements, installed_flydsl, pinned_by

    pins = pinned_by(flydsl_requirements(installed_flydsl()))
    if not pins:
        return "no other installed package (pip may install torch-flydsl[flydsl] here)"
    names = ", ".join(f"{r.dist} (flydsl{r.specifier})" for r in pins)
    return f"{names}: install torch-flydsl without the [flydsl] extra here"


def _flydsl_requirements() -> tuple[Optional[str], list[tuple[str, str, str, Optional[bool]]]]:
    """The installed flydsl, and everything installed that requires it, torch-flydsl last: the
    distribution, its version, the requirement, whether the installed flydsl satisfies it
    (None: no flydsl installed, or undecidable)."""
    from . import __version__
    from .runtime.probe import SUPPORTED_RANGE, flydsl_requirements, in_supported_range, installed_flydsl

    installed = installed_flydsl()
    out = [(r.dist, r.dist_version, r.requirement, r.satisfied) for r in flydsl_requirements(installed)]
    ours = in_supported_range(installed) if installed else None
    out.append(("torch-flydsl", __version__, f"flydsl{SUPPORTED_RANGE} (its [flydsl] extra)", ours))
    return installed, out


def flydsl_requirement_rows() -> list[tuple[str, str, str, str]]:
    """``_flydsl_requirements`` for the table: whether the installed flydsl satisfies each, in words."""
    installed, reqs = _flydsl_requirements()

    def said(dist: str, ok: Optional[bool]) -> str:
        if installed is None:
            return "no flydsl installed"
        word = "unknown" if ok is None else ("yes" if ok else "no")
        return f"{word} (the plugin is off)" if dist == "torch-flydsl" and ok is False else word

    return [(d, v, req, said(d, ok)) for d, v, req, ok in reqs]


def flydsl_verdict() -> str:
    """One line under the requirements table: may pip change flydsl here, and what to install."""
    from .runtime.probe import flydsl_install_refusal, flydsl_requirements, installed_flydsl, pinned_by, pinned_options

    why = flydsl_install_refusal()
    if why is None:
        return "No other installed package pins flydsl: pip install 'torch-flydsl[flydsl]' may install or replace it."
    installed = installed_flydsl()
    return (f"pip must not change flydsl here ({why}): install torch-flydsl without the [flydsl] extra. "
            f"{pinned_options(installed, pinned_by(flydsl_requirements(installed)))}")


def _here() -> tuple[str, int]:
    """The device this process would run FlyDSL kernels on: the CPU under the emulator and the
    stand-in, the first GPU otherwise."""
    from . import config

    return ("cpu", 0) if config.executor() in ("emulator", "reference-standin") else ("cuda", 0)


def serving_rows() -> list[tuple[str, str, str, str]]:
    """Per op family: who serves it here, who would on a gfx950 with this install, and why."""
    from .serving import all_ops, who_serves

    device_type, index = _here()
    out = []
    for op in all_ops():
        here = who_serves(op, device_type, index)
        mi350 = who_serves(op, assume_gfx950=True)
        out.append((op, here.served_by, mi350.served_by, here.reason if here.served_by != mi350.served_by else mi350.reason))
    return out


def family_rows() -> list[tuple[str, str, str, int]]:
    """Per registered kernel family: the ops it serves, its kernel version, its curated configs."""
    from .registry import families

    out = []
    for f in families():
        # Entry points first, then ops users name only in files and the CLI; once each.
        ops = f.serving_names + tuple(u.name for u in f.user_ops)
        out.append((f.name, ", ".join(dict.fromkeys(ops)), f.kernel_version, len(f.curated())))
    return out


def vllm_rows() -> list[tuple[str, str]]:
    """The vLLM route (read without importing vLLM): vLLM's version, the re-route knob, which
    re-routes are armed in this process (vLLM arms them in its own processes when it loads the
    plugin), the table's entries per op, recording, and the plugin's compile-cache fingerprint."""
    from . import config
    from .deploy import record, winners
    from .integrations.vllm import cache_key, common

    armed = common.armed_names()
    if common.enabled():
        knob = "on: vLLM arms the re-routes when it loads the plugin (vllm.general_plugins entry point)"
    else:
        knob = "off: vLLM's own kernels serve every layer"
    return [
        ("vLLM", _version("vllm")),
        (common.KNOB, knob),
        ("TORCH_FLYDSL_VLLM_MXFP4", "on: with the re-route on, MXFP4 (W4A4) linear layers the table names are re-routed too"
         if config.vllm_mxfp4() else "off: MXFP4 linear layers keep vLLM's kernels (opt-in)"),
        ("re-routes armed in this process", ", ".join(armed) if armed else "none (this is not a vLLM process)"),
        ("dispatch table", _dispatch_table()),
        (record.ENV, os.environ.get(record.ENV) or "off"),
        (winners.ENV, os.environ.get(winners.ENV) or "off"),
        ("compile-cache fingerprint", cache_key.fingerprint()),
    ]


def _native_index() -> str:
    """The deployment cache's native index in one line: how many code objects, and how many of
    the manifest's kernels have an intact one (never raises)."""
    from .deploy import manifest as mf
    from .deploy.native_index import DIRECTORY, HEADER, INDEX, index_lines
    from .runtime.cache import deployment_dir

    try:
        directory = deployment_dir()
        index = directory / DIRECTORY / INDEX
        if not index.is_file():
            return f"none in {directory} (precompile writes it; python -m torch_flydsl native export for an older cache)"
        if index.read_text().splitlines()[:1] != [HEADER]:
            return f"{index} is not a native index (its first line must be {HEADER!r})"
        lines = index_lines(directory)
        man = mf.read(directory)
    except (mf.ManifestError, OSError, UnicodeDecodeError) as e:
        return f"unreadable: {e}"
    held = sum(man.why_native_not_held(uid) is None for uid in man.kernels)
    return f"{len(lines)} code object(s) in {index} ({held} of {len(man.kernels)} precompiled kernels have an intact one)"


def _hip_library() -> str:
    """Which HIP runtime the C++ launcher opens (it dlopens it itself; this only looks)."""
    import ctypes.util

    named = os.environ.get("TORCH_FLYDSL_HIP_LIBRARY")
    if named:
        return f"TORCH_FLYDSL_HIP_LIBRARY={named}" + ("" if os.path.exists(named) else " (no such file)")
    found = ctypes.util.find_library("amdhip64")
    return f"{found} (libamdhip64)" if found else "none found (no libamdhip64: not a ROCm machine)"


def native_rows() -> list[tuple[str, str]]:
    """The C++ launcher (``torch_flydsl.native``): built for this torch and these sources? loaded
    here, or why not; the HIP library it opens; the deployment's native index. Never builds or
    loads anything itself."""
    from .native import build, loader

    try:
        lib = build.planned().library
        built = f"yes: {lib}" if lib.is_file() else f"no: {lib} is absent (python -m torch_flydsl native build)"
    except Exception as e:  # an unusable cache directory
        built = f"no: {type(e).__name__}: {e}"
    why_not_build = build.why_not_buildable()
    why_not_loaded = loader.why_not_loaded()
    out = [("built", built),
           ("buildable here", "yes" if why_not_build is None else f"no: {why_not_build}"),
           ("loaded in this process", "yes" if why_not_loaded is None else f"no: {why_not_loaded}")]
    if why_not_loaded is None:  # the library's own account: the HIP library it opened, its index
        import torch

        said = dict(line.split(": ", 1) for line in torch.ops.torch_flydsl_native.status().splitlines() if ": " in line)
        out += [("HIP library", said.get("hip", "?")), ("native index", said.get("index", "?"))]
    else:
        out += [("HIP library", _hip_library()), ("native index", _native_index())]
    return out


def as_json() -> dict:
    """``doctor --json``: the same report as one JSON object."""
    return {
        "checks": dict(rows()),
        "families": [{"family": f, "serves": s.split(", "), "kernel_version": v, "curated_configs": n}
                     for f, s, v, n in family_rows()],
        "serving": [{"op": op, "served_here": here, "on_gfx950": mi350, "why": why}
                    for op, here, mi350, why in serving_rows()],
        "vllm": dict(vllm_rows()),
        "native": dict(native_rows()),
        "flydsl_requirements": _flydsl_requirements_json(),
    }


def _flydsl_requirements_json() -> dict:
    from .runtime.probe import flydsl_install_refusal

    installed, reqs = _flydsl_requirements()
    return {"installed": installed,
            "requirements": [{"distribution": d, "version": v, "requires": req, "satisfied": ok}
                             for d, v, req, ok in reqs],
            "pip_may_change_flydsl": flydsl_install_refusal() is None}


def report() -> str:
    table = tabulate(rows(), tablefmt="plain")
    fams = tabulate(family_rows(), headers=["family", "serves", "kernel version", "curated configs"])
    serving = tabulate(serving_rows(), headers=["op", "served here", "on a gfx950", "why"], maxcolwidths=[None, None, None, 90])
    vllm = tabulate(vllm_rows(), tablefmt="plain", maxcolwidths=[None, 100])
    native = tabulate(native_rows(), tablefmt="plain", maxcolwidths=[None, 110])
    reqs = tabulate(flydsl_requirement_rows(), headers=["distribution", "version", "requires", "installed flydsl satisfies it"])
    return (f"{table}\n\nKernel families:\n{fams}\n\n"
            f"Who serves each op (Inductor ops: when FLYDSL is requested under max-autotune):\n{serving}\n\n"
            f"vLLM:\n{vllm}\n\n"
            f"Native launcher (C++, GEMM ops on ROCm without Python):\n{native}\n\n"
            f"Who requires flydsl (installed flydsl: {_version('flydsl')}):\n{reqs}\n{flydsl_verdict()}")
