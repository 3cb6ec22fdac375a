"""Plugin knobs are environment variables, parsed at use time, one way everywhere; a value we
cannot read keeps the default and says so once."""

import logging
import re
from pathlib import Path

import pytest

import torch_flydsl_boot
from torch_flydsl import config

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
# Names in the plugin's namespace that are not settings: the key under which the plugin adds its
# fingerprint to vLLM's compile-cache hash (vllm.envs.environment_variables), not read from the
# environment.
NOT_KNOBS = {"TORCH_FLYDSL_FINGERPRINT"}


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(torch_flydsl_boot, "_warned", set())


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


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " Yes ", "on", "On"])
def test_every_true_spelling_disables(monkeypatch, raw):
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", raw)
    assert config.disabled() and torch_flydsl_boot.disabled_by_env()


@pytest.mark.parametrize("raw", ["0", "false", "False", "no", "OFF", "", "  "])
def test_every_false_spelling_keeps_the_plugin_on(monkeypatch, raw):
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", raw)
    assert not config.disabled() and not torch_flydsl_boot.disabled_by_env()


def test_the_entry_point_and_the_package_read_the_kill_switch_the_same_way(monkeypatch):
    # Regression: TORCH_FLYDSL_DISABLE=false left the plugin active while is_enabled() said no.
    import torch_flydsl
    from torch_flydsl import _autoload

    monkeypatch.setattr(_autoload, "_done", True)  # the entry point enabled the plugin
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", "false")
    assert torch_flydsl.is_enabled()
    monkeypatch.setenv("TORCH_FLYDSL_DISABLE", "yes")
    assert not torch_flydsl.is_enabled()


@pytest.mark.parametrize(
    "name, raw, read",
    [
        ("TORCH_FLYDSL_DISABLE", "maybe", lambda: config.disabled() is False),
        ("TORCH_FLYDSL_AUTOTUNE", "sometimes", lambda: config.autotune_breadth() == "baseline"),
        ("TORCH_FLYDSL_EXECUTOR", "gpu-please", lambda: config.executor() == "device"),
        ("TORCH_FLYDSL_INTREE_POLICY", "both", lambda: config.intree_policy() == "defer"),
    ],
)
def test_a_bad_value_warns_once_naming_the_variable_and_keeps_the_default(
    monkeypatch, caplog, fresh_warnings, name, raw, read
):
    monkeypatch.setenv(name, raw)
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        assert read() and read()
    assert caplog.text.count(name) == 1 and repr(raw) in caplog.text and "using the default" in caplog.text


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


def knob_table(text: str) -> dict[str, str]:
    """The one table of docs/configuration.md: every name in backticks in a row's first cell,
    mapped to that row's default (second cell, backticks dropped)."""
    tables = re.findall(r"(?:^\|.*\|[ \t]*\n?)+", text, flags=re.M)
    assert len(tables) == 1, f"docs/configuration.md must hold exactly one table, found {len(tables)}"
    rows = {}
    for line in tables[0].splitlines()[2:]:  # past the header and its |---| line
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
            rows[name] = cells[1].strip("`")
    return rows


def knobs_the_code_reads() -> set[str]:
    """Every TORCH_FLYDSL_* name the package or its entry-point module spells out, and every
    FLYDSL_* / HSA_* variable it reads with os.environ.get."""
    sources = [ROOT / "torch_flydsl_boot.py", *sorted((ROOT / "torch_flydsl").rglob("*.py"))]
    names = set()
    for path in sources:
        text = path.read_text()
        names |= set(re.findall(r"[\"'](TORCH_FLYDSL_[A-Z0-9_]+)[\"']", text))
        names |= set(re.findall(r"os\.environ\.get\(\s*[\"']((?:FLYDSL|HSA)_[A-Z0-9_]+)[\"']", text))
    return names - NOT_KNOBS


def test_configuration_table_lists_exactly_the_plugin_knobs_with_their_defaults():
    # docs/configuration.md's one table lists exactly config.KNOBS, with the same defaults.
    table = knob_table(CONFIGURATION.read_text())
    documented = {name: default for name, default in table.items() if name.startswith("TORCH_FLYDSL_")}
    in_code = {k.env: (k.default if k.default else "unset") for k in config.KNOBS}
    assert documented == in_code


def test_every_knob_the_code_reads_is_in_the_configuration_table():
    read = knobs_the_code_reads()
    assert {"TORCH_FLYDSL_DISABLE", "FLYDSL_GPU_ARCH", "HSA_OVERRIDE_GFX_VERSION", "FLYDSL_RUNTIME_CACHE_DIR"} <= read
    missing = read - set(knob_table(CONFIGURATION.read_text()))
    assert not missing, f"read by the code but not in docs/configuration.md's table: {sorted(missing)}"


def test_the_knob_table_check_fails_for_a_missing_row():
    text = CONFIGURATION.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `TORCH_FLYDSL_RUN_ONLY`"))
    assert "TORCH_FLYDSL_RUN_ONLY" not in knob_table(text.replace(row + "\n", ""))
    with pytest.raises(AssertionError, match="exactly one table"):
        knob_table(text.replace(row + "\n", "\n" + row + "\n\n"))


@pytest.mark.parametrize("category, reason", [("shape", ""), ("shape", "   "), ("", "why"), ("dtype", None)])
def test_a_decline_cannot_be_built_without_a_readable_reason(category, reason):
    from torch_flydsl.templates.base import Decline

    with pytest.raises(ValueError):
        Decline(category, reason)


def test_cache_key_reads_knobs_as_parsed(monkeypatch, fresh_warnings):
    # Spellings that mean the same compile the same code and must hit the same cache entry.
    monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", "1")
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "Emulator")
    key = config.cache_key_knobs()
    monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", " TRUE ")
    monkeypatch.setenv("TORCH_FLYDSL_EXECUTOR", "emulator")
    assert config.cache_key_knobs() == key
    monkeypatch.setenv("TORCH_FLYDSL_AUTOTUNE", "curated")
    assert config.cache_key_knobs() != key
