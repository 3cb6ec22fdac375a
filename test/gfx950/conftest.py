"""The gfx950 hardware tier: every test here needs a real MI350.

Without ``-m gfx950`` the top-level conftest skips these tests. When they are requested, a
machine without a usable gfx950 must fail them, never skip: a green run that tested nothing
would pass for hardware validation. The gate decides before anything is launched.
"""

import pytest
import torch
from gfx950_kit import NEED, gfx950_devices, spy_on_launcher


@pytest.fixture(autouse=True)
def gfx950(monkeypatch) -> list[torch.device]:
    """The usable gfx950 devices (at least one); fails the test when there is none."""
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "device")  # the launch guard reads it
    devices, why = gfx950_devices()
    if not devices:
        pytest.fail(f"{NEED}: {why}", pytrace=False)
    return devices


@pytest.fixture
def device(gfx950) -> torch.device:
    return gfx950[0]


@pytest.fixture
def spy(monkeypatch, gfx950):
    """Counts real launches and compiles of FlyDSL kernels during the test."""
    with spy_on_launcher(monkeypatch) as s:
        yield s
