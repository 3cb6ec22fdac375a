"""The seeds' autotuning switch: torch 2.15's ``torch._inductor.config.flydsl_enable_autotuning``
(and its env var ``FLYDSL_ENABLE_AUTOTUNING``) turns on the curated FlyDSL search like
``TORCH_FLYDSL_AUTOTUNE=1``; the plugin's own knob wins when both are set. Runs on every torch of
the version matrix: the config-key cases skip where torch lacks the key."""

from __future__ import annotations

import pytest
import torch._inductor.config as ic

from torch_flydsl import config
from torch_flydsl.explain import explain

HAS_KEY = hasattr(ic, config.SEEDS_AUTOTUNE_KEY)
needs_key = pytest.mark.skipif(not HAS_KEY, reason="this torch's Inductor has no flydsl_enable_autotuning (2.15+)")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("TORCH_FLYDSL_AUTOTUNE", raising=False)
    monkeypatch.delenv(config.SEEDS_AUTOTUNE_ENV, raising=False)


def offered(n=4096) -> int:
    return len(explain("mm", 128, n, n, layout="nt").offered)


def test_default_is_the_baseline_config():
    if HAS_KEY:
        assert getattr(ic, config.SEEDS_AUTOTUNE_KEY) is False
    assert config.autotune_breadth() == "baseline" and offered() == 1


@needs_key
def test_inductors_key_turns_on_the_curated_search():
    with ic.patch({config.SEEDS_AUTOTUNE_KEY: True}):
        assert config.autotune_breadth() == "curated"
        assert config.autotune_breadth("EXHAUSTIVE") == "exhaustive"
        assert offered() > 1
        # what Inductor's offer for a compiled mm reads: the curated configs that fit
        assert offered() == len(explain("mm", 128, 4096, 4096, layout="nt", breadth="curated").offered)
    assert config.autotune_breadth() == "baseline"


def test_the_env_var_turns_it_on_on_every_torch(monkeypatch):
    monkeypatch.setenv(config.SEEDS_AUTOTUNE_ENV, "1")
    if HAS_KEY:  # torch read the variable into its key at import: the key decides now
        with ic.patch({config.SEEDS_AUTOTUNE_KEY: True}):
            assert config.autotune_breadth() == "curated"
    else:
        assert config.autotune_breadth() == "curated"
    monkeypatch.setenv(config.SEEDS_AUTOTUNE_ENV, "true")  # torch 2.15 takes exactly "1"
    if not HAS_KEY:
        assert config.autotune_breadth() == "baseline"


@pytest.mark.parametrize("ours, want", [("0", "baseline"), ("exhaustive", "exhaustive")])
def test_the_plugins_own_knob_wins(monkeypatch, ours, want):
    monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", ours)
    monkeypatch.setenv(config.SEEDS_AUTOTUNE_ENV, "1")
    if HAS_KEY:
        with ic.patch({config.SEEDS_AUTOTUNE_KEY: True}):
            assert config.autotune_breadth() == want
    else:
        assert config.autotune_breadth() == want


@pytest.mark.skipif(HAS_KEY, reason="this torch has the key")
def test_without_the_key_torch_refuses_the_assignment_the_docs_replace():
    """docs/configuration.md: before torch 2.15 the seeds' line raises; FLYDSL_ENABLE_AUTOTUNING=1
    or TORCH_FLYDSL_AUTOTUNE=1 is what to write instead."""
    with pytest.raises(AttributeError, match="flydsl_enable_autotuning"):
        ic.flydsl_enable_autotuning = True
