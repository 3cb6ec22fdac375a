"""Installing the Inductor glue: compose with another choices class, defer to in-tree FlyDSL."""

import functools
import logging

import pytest
import torch._inductor.config as ic
import torch._inductor.lowering  # noqa: F401  (what the post-import hook waits for)
from torch._inductor.choices import InductorChoices

from torch_flydsl.inductor import install as install_mod
from torch_flydsl.inductor.choices import FlyDSLChoicesMixin, is_ours


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


@pytest.mark.parametrize("policy, installs", [("defer", False), ("plugin", True)])
def test_in_tree_flydsl_policy(fresh_install, monkeypatch, caplog, policy, installs):
    monkeypatch.setattr(install_mod, "intree_flydsl_present", lambda: True)
    monkeypatch.setenv("TORCH_FLYDSL_INTREE_POLICY", policy)
    with caplog.at_level(logging.INFO, logger="torch_flydsl"):
        assert fresh_install() is installs
    assert is_ours(ic.inductor_choices_class) is installs
    if not installs:
        assert "ships its own FlyDSL" in caplog.text
    assert install_mod.active_implementation() == ("in-tree" if policy == "defer" else "both")
