"""The deployment tests run precompile with the native launcher's build off
(``TORCH_FLYDSL_NATIVE=0``: a C++ build is a minute on two cores, and each test session has a
fresh cache): the code objects are still exported. ``test_precompile_native.py`` turns it on
where it checks the build step."""

import pytest


@pytest.fixture(autouse=True)
def _no_native_build(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_NATIVE", "0")
