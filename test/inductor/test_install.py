"""Installing the Inductor glue: compose with another choices class; install on any torch >= 2.11."""

import functools
import logging

import pytest
import torch
import torch._inductor.config as ic
import torch._inductor.lowering  # noqa: F401  (what the post-import hook waits for)
from torch._inductor.choices import InductorChoices

from torch_flydsl.inductor import install as install_mod
from torch_flydsl.inductor.choices import FlyDSLChoicesMixin, is_ours
from torch_flydsl.runtime import intree


@pytest.fixture
def fresh_install(monkeypatch):
    monkeypatch.setattr(install_mod, "_installed", False)
    # Inductor's config module must be patched with its own context manager.
    with ic.patch(inductor_choices_class=None):
        yield install_mod.install


class TheirChoices(InductorChoices):
    """Stands in for another package's choices class (TLX, a lookup table, user code)."""

    def uuid(self):
        return "theirs-v1"


def test_default_install_sets_a_versioned_factory(fresh_install):
    assert fresh_install() is True
    factory = ic.inductor_choices_class
    assert is_ours(factory)
    obj = factory()
    assert isinstance(obj, FlyDSLChoicesMixin) and isinstance(obj, InductorChoices)
    assert obj.uuid()[0][0] == "torch_flydsl"


def test_existing_choices_class_is_composed_not_replaced(fresh_install, monkeypatch):
    ic.inductor_choices_class = TheirChoices
    assert fresh_install() is True
    obj = ic.inductor_choices_class()
    assert isinstance(obj, TheirChoices) and isinstance(obj, FlyDSLChoicesMixin)
    assert obj.uuid()[-1] == "theirs-v1"  # their cache identity is kept inside ours


def test_foreign_factory_that_is_not_a_class_is_left_alone(fresh_install, monkeypatch, caplog):
    theirs = functools.partial(TheirChoices)
    ic.inductor_choices_class = theirs
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        assert fresh_install() is False
    assert ic.inductor_choices_class is theirs
    assert "leaves it alone" in caplog.text


def test_glue_installs_on_a_torch_with_its_own_flydsl_backend(fresh_install, monkeypatch):
    # Coexistence is decided per op and node (torch_flydsl.serving), not by refusing to install.
    monkeypatch.setattr(intree, "intree_flydsl_present", lambda: True)
    intree.install_status.cache_clear()
    try:
        assert fresh_install() is True and is_ours(ic.inductor_choices_class)
    finally:
        intree.install_status.cache_clear()


def test_a_torch_newer_than_the_newest_tested_gets_the_glue_and_a_log_line(fresh_install, monkeypatch, caplog):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with caplog.at_level(logging.INFO, logger="torch_flydsl"):
        assert fresh_install() is True
    assert "torch 2.99.0 is newer than the newest release torch_flydsl was tested on" in caplog.text
