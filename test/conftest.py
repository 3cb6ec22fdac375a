"""Shared test setup: one Inductor cache per session, the test tiers and their rules.

Tiers, selected by marker (never by keyword: a directory name must not sweep tests in):
- unmarked: unit and Inductor-glue tests; need torch only.
- ``compile``: compile FlyDSL kernels for gfx950 on the CPU (flydsl + ld.lld).
- ``emulator``: run compiled kernels in the emulator (flydsl + ld.lld).
- ``slow``: sweeps of minutes on the 2-core CI machine; not run unless asked for
  (``-m slow``, or any ``-m`` expression naming it). CI does not run them.
- ``gfx950``: need a real MI350; not run unless ``-m gfx950`` is given, and then they fail
  (test/gfx950/conftest.py) on a machine without one.

Without flydsl or ld.lld the ``compile``/``emulator`` tiers skip with the reason locally (the
emulator also needs flydsl 0.4+);
under ``CI`` (any true value) a missing toolchain stops the run with an error instead, so a
green CI always means the kernel tiers ran.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile

import pytest

# Every test process gets a private Inductor/FlyDSL cache: nothing leaks between runs or
# from the developer's own caches.
_CACHE = tempfile.mkdtemp(prefix="torch_flydsl_test_cache_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _CACHE)
os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", os.path.join(_CACHE, "flydsl"))

TOOLCHAIN_TIERS = ("compile", "emulator")
OPT_IN_TIERS = ("slow", "gfx950")


def have_compile_toolchain() -> tuple[bool, str]:
    from torch_flydsl.runtime.probe import find_lld, flydsl_info

    info = flydsl_info()
    if not info.usable:
        return False, f"flydsl unusable: {info.reason}"
    if find_lld() is None:
        return False, "no ld.lld (apt-get install lld-19)"
    return True, ""


def in_ci() -> bool:
    from torch_flydsl_boot import env_flag

    return env_flag("CI", False)


def pytest_sessionstart(session):
    ok, why = have_compile_toolchain()
    if ok:
        ok, why = have_emulator()
    if not ok and in_ci():
        pytest.exit(
            f"CI is set but the gfx950 compile toolchain is missing ({why}): the compile and "
            "emulator tiers cannot run. .ci/run installs it through scripts/setup.sh.",
            returncode=3,
        )


def _requested(config, marker: str) -> bool:
    return marker in (config.getoption("-m") or "")


def have_emulator() -> tuple[bool, str]:
    """The emulator runs what ``flyc.compile`` returns without launching: flydsl 0.4+."""
    from torch_flydsl.runtime.probe import flydsl_has_cpu_safe_compile, flydsl_info

    if not flydsl_has_cpu_safe_compile():
        return False, f"the emulator needs flydsl 0.4+ (this is {flydsl_info().version})"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, why = have_compile_toolchain()
    emu_ok, emu_why = have_emulator() if ok else (False, why)
    for item in items:
        if not ok and any(item.get_closest_marker(t) for t in TOOLCHAIN_TIERS):
            item.add_marker(pytest.mark.skip(reason=why))
        elif not emu_ok and item.get_closest_marker("emulator"):
            item.add_marker(pytest.mark.skip(reason=emu_why))
        for tier in OPT_IN_TIERS:
            if item.get_closest_marker(tier) and not _requested(config, tier):
                item.add_marker(pytest.mark.skip(reason=f"{tier} tier: run with -m {tier}"))


_tier_counts: collections.Counter = collections.Counter()


def _tier(item) -> str:
    for tier in OPT_IN_TIERS + TOOLCHAIN_TIERS:
        if item.get_closest_marker(tier):
            return tier
    return "unit/glue"


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _tier_counts[(getattr(report, "_tier", None) or "?", report.outcome)] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result()._tier = _tier(item)  # travels with the report (also from xdist workers)


def pytest_terminal_summary(terminalreporter):
    if not _tier_counts:
        return
    tiers = sorted({t for t, _ in _tier_counts})
    terminalreporter.section("tests per tier")
    for t in tiers:
        parts = ", ".join(f"{n} {o}" for (tt, o), n in sorted(_tier_counts.items()) if tt == t)
        terminalreporter.write_line(f"{t:>10}: {parts}")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)
