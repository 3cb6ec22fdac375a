"""Plugin knobs are environment variables, parsed at use time with clear errors."""

import pytest

from torch_flydsl import config


@pytest.mark.parametrize(
    "raw, search_space, expected",
    [
        (None, "DEFAULT", "baseline"),
        ("0", "EXHAUSTIVE", "baseline"),
        ("1", "DEFAULT", "curated"),
        ("1", "EXHAUSTIVE", "exhaustive"),
        ("curated", "EXHAUSTIVE", "curated"),
        ("exhaustive", "DEFAULT", "exhaustive"),
    ],
)
def test_autotune_breadth_follows_env_and_inductor_search_space(monkeypatch, raw, search_space, expected):
    if raw is None:
        monkeypatch.delenv("TORCH_FLYDSL_AUTOTUNE", raising=False)
    else:
        monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", raw)
    assert config.autotune_breadth(search_space) == expected


def test_bad_values_raise_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", "sometimes")
    with pytest.raises(ValueError, match="TORCH_FLYDSL_AUTOTUNE"):
        config.autotune_breadth()
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "gpu-please")
    with pytest.raises(ValueError, match="TORCH_FLYDSL_EXECUTOR"):
        config.executor()


@pytest.mark.parametrize(
    "backends, expected",
    [("ATEN,TRITON,FLYDSL", True), (" aten , flydsl ", True), ("ATEN,TRITON", False), ("FLYDSLX", False), ("", False)],
)
def test_backend_list_parsed_like_inductor(backends, expected):
    assert config.backends_include_flydsl(backends) is expected


def test_knobs_are_read_at_use_time(monkeypatch):
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", "1")
    assert config.disabled()
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", "0")
    assert not config.disabled()
