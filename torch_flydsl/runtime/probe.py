"""What this process could do with FlyDSL, found without importing it.

Importing flydsl loads its own LLVM/MLIR, which is slow and has clashed with Triton's copy in
the past, so every question here is answered from package metadata and the file system.

Other packages may pin flydsl: AITER, in vLLM's ROCm images, requires the exact release its
prebuilt FlyDSL kernels were built with. ``flydsl_requirements`` lists who requires flydsl and
whether the installed one satisfies them; the plugin never asks pip to replace a pinned flydsl
(``flydsl_install_refusal``, which ``scripts/setup.sh`` runs as ``python -m
torch_flydsl.runtime.probe may-install-flydsl``), and with a flydsl outside its range it stays
off and says why once per process (``off_warning``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

# Supported FlyDSL releases: 0.3.2 added the cdna4 primitives our kernels use; the public API
# only grew up to 0.5.x. A newer minor is declined until it has been tested.
MIN_FLYDSL = (0, 3, 2)
MAX_FLYDSL_EXCLUSIVE = (0, 6)
# pyproject.toml's `flydsl` extra states the same range (test/test_flydsl_coexistence.py checks it).
SUPPORTED_RANGE = f">={'.'.join(map(str, MIN_FLYDSL))},<{'.'.join(map(str, MAX_FLYDSL_EXCLUSIVE))}"
OWN_DIST = "torch-flydsl"
INSTALL_HINT = "pip install 'torch-flydsl[flydsl]'"


def _parse_version(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not p.isdigit():
            break
    return tuple(parts)


@dataclass(frozen=True)
class FlyDSLInfo:
    installed: bool
    version: Optional[str]
    supported: bool
    reason: Optional[str]  # why not usable, when it isn't

    @property
    def usable(self) -> bool:
        return self.installed and self.supported


@functools.lru_cache(maxsize=None)
def flydsl_info() -> FlyDSLInfo:
    """What flydsl this process has and whether the plugin can use it. A flydsl outside the
    supported range logs ``off_warning()`` once per process (this runs at first use: nothing
    calls it at ``import torch``)."""
    if importlib.util.find_spec("flydsl") is None:
        pins = pinned_by(flydsl_requirements(None))
        if pins:
            return FlyDSLInfo(False, None, False, f"flydsl is not installed (required by {_pins_text(pins)}; the "
                                                  f"plugin needs {SUPPORTED_RANGE})")
        return FlyDSLInfo(False, None, False, f"flydsl is not installed ({INSTALL_HINT})")
    try:
        version = importlib.metadata.version("flydsl")
    except importlib.metadata.PackageNotFoundError:
        return FlyDSLInfo(True, None, False, "flydsl has no package metadata; cannot check its version")
    if not in_supported_range(version):
        pins = pinned_by(flydsl_requirements(version))
        why = f"flydsl {version} is outside the supported range {SUPPORTED_RANGE}"
        if pins:
            why += f" and pinned by {_pins_text(pins)}"
        info = FlyDSLInfo(True, version, False, why)
        _warn_off(version, pins)
        return info
    return FlyDSLInfo(True, version, True, None)


def in_supported_range(version: str) -> bool:
    v = _parse_version(version)
    return MIN_FLYDSL <= v and v[:2] < MAX_FLYDSL_EXCLUSIVE


# --- who else requires flydsl ------------------------------------------------------------------


@dataclass(frozen=True)
class FlyDSLRequirement:
    """One installed distribution's ``Requires-Dist`` on flydsl."""

    dist: str  # the distribution's name, as its metadata spells it
    dist_version: str
    specifier: str  # e.g. "==0.3.1"; "" when it names no version
    marker: Optional[str]  # its environment marker when it has one (e.g. extra == "rocm")
    satisfied: Optional[bool]  # by the installed flydsl; None: no flydsl, or not decidable here

    @property
    def pins(self) -> bool:
        """Whether it constrains the version: then pip must not replace flydsl under it."""
        return bool(self.specifier)

    @property
    def requirement(self) -> str:
        when = f" ({self.marker})" if self.marker else ""
        return f"flydsl{self.specifier}{when}" if self.specifier else f"flydsl, any version{when}"

    def line(self) -> str:
        return f"{self.dist} {self.dist_version} requires {self.requirement}"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*\(?\s*([^;()]*?)\s*\)?\s*(?:;(.*))?$")


def _parse_requirement(line: str) -> Optional[tuple[str, str, Optional[str], bool]]:
    """``Requires-Dist`` text as (name, specifier, marker, applies here). With ``packaging`` (a
    dependency of the plugin) markers other than extras are evaluated; without it the text is
    split as written and every requirement counts."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        m = _REQ.match(line)
        if not m:
            return None
        marker = (m.group(4) or "").strip() or None
        return m.group(1), re.sub(r"\s+", "", m.group(3)), marker, True
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    if req.marker is None:
        return req.name, str(req.specifier), None, True
    marker = str(req.marker)
    if "extra" in marker:  # whether that extra was installed is not recorded: count it
        return req.name, str(req.specifier), marker, True
    try:
        applies = req.marker.evaluate()
    except Exception:
        applies = True
    return req.name, str(req.specifier), marker, applies


def _satisfies(version: Optional[str], specifier: str) -> Optional[bool]:
    if version is None:
        return None
    if not specifier:
        return True
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return None
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def flydsl_requirements(installed: Optional[str] = None) -> tuple[FlyDSLRequirement, ...]:
    """Every other installed distribution that requires flydsl (torch-flydsl itself left out),
    with whether ``installed`` (the installed flydsl's version) satisfies it. Reads metadata
    only; a distribution whose metadata cannot be read is skipped."""
    found: dict[tuple[str, str, str], FlyDSLRequirement] = {}
    for dist in importlib.metadata.distributions():
        try:
            name = dist.metadata["Name"] or ""
            requires = dist.requires or []
        except Exception:
            continue
        if not name or _canonical(name) == OWN_DIST:
            continue
        for line in requires:
            parsed = _parse_requirement(line)
            if parsed is None or _canonical(parsed[0]) != "flydsl" or not parsed[3]:
                continue
            _, spec, marker, _ = parsed
            req = FlyDSLRequirement(name, dist.version, spec, marker, _satisfies(installed, spec))
            found.setdefault((_canonical(name), spec, marker or ""), req)  # one dist on sys.path twice
    return tuple(sorted(found.values(), key=lambda r: (_canonical(r.dist), r.specifier)))


def pinned_by(requirements: Sequence[FlyDSLRequirement]) -> tuple[FlyDSLRequirement, ...]:
    return tuple(r for r in requirements if r.pins)


def _pins_text(pins: Sequence[FlyDSLRequirement]) -> str:
    """``amd-aiter 0.1.20 (flydsl==0.3.1)``, for one-line reasons."""
    return ", ".join(f"{r.dist} {r.dist_version} (flydsl{r.specifier})" for r in pins)


def installed_flydsl() -> Optional[str]:
    """The installed flydsl's version from its metadata (None: not installed)."""
    try:
        return importlib.metadata.version("flydsl")
    except importlib.metadata.PackageNotFoundError:
        return None


def flydsl_install_refusal() -> Optional[str]:
    """Why nothing may install, upgrade or downgrade flydsl here, or None when no other installed
    package pins it. A pin is a ``Requires-Dist`` on flydsl with a version specifier: pip, asked
    for the plugin's range, would replace that package's flydsl and only warn afterwards."""
    installed = installed_flydsl()
    pins = pinned_by(flydsl_requirements(installed))
    if not pins:
        return None
    if installed is None:
        have = "flydsl is not installed"
    else:
        where = "in" if in_supported_range(installed) else "outside"
        have = f"the installed flydsl {installed} is {where} the plugin's range {SUPPORTED_RANGE}"
    return f"{'; '.join(r.line() for r in pins)}; {have}"


def pinned_options(installed: Optional[str], pins: Sequence[FlyDSLRequirement]) -> str:
    """What a user whose flydsl another package pins can do (never: replace it). A pin the
    installed flydsl does not meet (replaced since?) gets the command that restores it."""
    broken = [r for r in pins if r.satisfied is False]
    restore = [f"The installed flydsl {installed} does not meet {r.dist} {r.dist_version}'s {r.requirement}: "
               f"pip install 'flydsl{r.specifier}' restores it." for r in broken]
    if installed and in_supported_range(installed) and not broken:
        return "The installed flydsl serves the plugin as it is."
    who = ", ".join(dict.fromkeys(r.dist for r in pins))
    return " ".join(restore + [
        f"To use the plugin, install torch-flydsl with a flydsl {SUPPORTED_RANGE} in a separate virtual "
        f"environment, or wait for {who} to require a flydsl in that range."])


# --- the one warning ---------------------------------------------------------------------------

_off_warned = False


def off_warning(version: str, pins: Sequence[FlyDSLRequirement]) -> str:
    """Why the plugin is off with this flydsl, and what the user can do about it."""
    head = (f"torch_flydsl is off in this process: flydsl {version} is installed and the plugin needs "
            f"{SUPPORTED_RANGE}")
    tail = "PyTorch's (and vLLM's) own kernels serve every op; `python -m torch_flydsl doctor` says more."
    if pins:
        theirs = "; ".join(r.line() for r in pins)
        who = ", ".join(dict.fromkeys(r.dist for r in pins))
        return (f"{head}, but {theirs}: keep that flydsl ({INSTALL_HINT} would replace it and break {who}). "
                f"{pinned_options(version, pins)} {tail}")
    if _parse_version(version)[:2] >= MAX_FLYDSL_EXCLUSIVE:
        fix = (f"a later torch-flydsl may support it; no installed package pins flydsl, so {INSTALL_HINT} "
               f"would install a flydsl in range instead")
    else:
        fix = f"no installed package pins flydsl, so {INSTALL_HINT} installs one in range"
    return f"{head}: {fix}. {tail}"


def _warn_off(version: str, pins: Sequence[FlyDSLRequirement]) -> None:
    global _off_warned
    if _off_warned:
        return
    _off_warned = True
    from .._log import log

    log.warning("%s", off_warning(version, pins))


def off_warned() -> bool:
    """Whether this process has logged (or handed to ``doctor``) why the plugin is off with its
    flydsl: a caller that would warn about the same cause stays quiet."""
    return _off_warned


def off_reported_elsewhere() -> None:
    """The caller reports why the plugin is off itself (``doctor``): no warning in this process."""
    global _off_warned
    _off_warned = True


def flydsl_has_cpu_safe_compile() -> bool:
    """0.4.0 added a ``flyc.compile`` that returns without launching; 0.3.x needs COMPILE_ONLY."""
    version = flydsl_info().version
    return _parse_version(version) >= (0, 4) if version else False


def find_lld() -> Optional[Path]:
    """An ld.lld FlyDSL can use: $ROCM_PATH/llvm/bin/ld.lld, /opt/rocm's, or a Debian lld-N."""
    roots = [os.environ.get("ROCM_PATH"), "/opt/rocm"]
    for root in roots:
        if root:
            p = Path(root) / "llvm" / "bin" / "ld.lld"
            if p.exists():
                return p
    for name in ("ld.lld", "ld.lld-19", "ld.lld-18", "ld.lld-17"):
        w = shutil.which(name)
        if w:
            return Path(w)
    return None


def hip_runtime_present() -> bool:
    """A HIP build of torch that sees a GPU. Without it a FlyDSL launch aborts the process."""
    import torch

    return torch.version.hip is not None and torch.cuda.is_available()


def torch_file(relative: str) -> Optional[Path]:
    """A file inside the installed torch package, found without importing anything (importing
    torch 2.15's in-tree FlyDSL package pulls in most of Inductor and Triton: seconds)."""
    spec = importlib.util.find_spec("torch")
    roots = list(getattr(spec, "submodule_search_locations", None) or [])
    for root in roots:
        p = Path(root) / relative
        if p.exists():
            return p
    return None


def intree_flydsl_present() -> bool:
    """Whether this torch ships its own Inductor FlyDSL backend (torch 2.15+)."""
    return torch_file("_inductor/codegen/flydsl/__init__.py") is not None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m torch_flydsl.runtime.probe may-install-flydsl``: exit 0 when nothing else pins
    flydsl (an installer may install the plugin's range), 1 with the reason on stderr when
    another installed package does (scripts/setup.sh then installs no flydsl)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["may-install-flydsl"]:
        print("usage: python -m torch_flydsl.runtime.probe may-install-flydsl", file=sys.stderr)
        return 2
    why = flydsl_install_refusal()
    if why is None:
        return 0
    installed = installed_flydsl()
    print(f"{why}: pip must not install, upgrade or downgrade flydsl here. "
          f"{pinned_options(installed, pinned_by(flydsl_requirements(installed)))}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
