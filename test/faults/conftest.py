"""Fixtures of the fault suite: one warm Inductor cache per test session, shared by pytest-xdist
workers (built once, ``faultkit.once``), which scenarios copy before planting their fault."""

from __future__ import annotations

from pathlib import Path

import pytest

import faultkit as fk


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory) -> Path:
    """An Inductor cache whose FX-graph entry for model.py calls ``torch.ops.torch_flydsl.*``:
    process A compiled it with the emulator executor and a forced FlyDSL win, and ran the
    emulated gfx950 kernel. Read-only for scenarios: use ``fk.copy_cache``."""

    def build(root: Path) -> str:
        a = fk.run_model(root / "inductor", root, fk.EMULATOR, force_win=True).ok()
        assert a.flydsl_called and a.result["emulated"] == 1, a.stderr[-3000:]
        return str(root / "inductor")

    return Path(fk.once(tmp_path_factory, "faults_warm", build))


@pytest.fixture
def warm_copy(warm_cache, tmp_path) -> Path:
    """A private copy of the warm cache for one scenario to fault."""
    return fk.copy_cache(warm_cache, tmp_path / "inductor")
