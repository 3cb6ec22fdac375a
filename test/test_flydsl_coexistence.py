"""flydsl pinned by another package (issue 19, item 5): AITER, in vLLM's ROCm images, requires the
exact flydsl its prebuilt FlyDSL kernels were built with (0.3.1 as last seen), outside the
plugin's range. The plugin must never replace it: it lists who requires flydsl (`doctor`), warns
once at first use that it is off and why, and `scripts/setup.sh` installs no flydsl over a pin.

The stand-in environment is a directory of dist-info folders put first on the path: a
``flydsl-<v>.dist-info`` there is what ``importlib.metadata.version("flydsl")`` finds first (the
real flydsl package still imports), and an ``amd_aiter-0.1.20.dist-info`` requires it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_flydsl.runtime import probe

REPO = Path(__file__).resolve().parents[1]


def dist_info(root: Path, name: str, version: str, *requires: str) -> None:
    d = root / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (d / "METADATA").write_text("\n".join(lines) + "\n")


def aiter_image(root: Path, flydsl: str = "0.3.1", pin: str = "flydsl==0.3.1") -> Path:
    """What a vLLM ROCm image holds, as metadata: AITER pinning flydsl, and that flydsl."""
    dist_info(root, "flydsl", flydsl)
    dist_info(root, "amd-aiter", "0.1.20", "packaging", pin)
    return root


@pytest.fixture
def fresh_probe(monkeypatch):
    """A probe that has not answered or warned yet in this process; restored afterwards."""
    monkeypatch.setattr(probe, "_off_warned", False)
    probe.flydsl_info.cache_clear()
    yield
    probe.flydsl_info.cache_clear()


@pytest.fixture
def image(tmp_path, monkeypatch, fresh_probe):
    root = aiter_image(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    return root


def test_the_stand_in_image_is_what_metadata_shows(image):
    import importlib.metadata

    assert importlib.metadata.version("flydsl") == "0.3.1"
    assert importlib.metadata.version("amd-aiter") == "0.1.20"


def test_requirements_list_who_requires_flydsl_and_whether_the_installed_one_satisfies_them(tmp_path, monkeypatch):
    root = tmp_path / "site"
    dist_info(root, "amd-aiter", "0.1.20", "flydsl==0.3.1")
    dist_info(root, "some-tool", "1.0", "flydsl")  # names no version: requires it, pins nothing
    dist_info(root, "old-py", "1.0", 'flydsl==0.1.0; python_version < "3"')  # does not apply here
    dist_info(root, "sglang-ish", "2.0", 'flydsl (>=0.3,<0.4) ; extra == "rocm"')  # an extra's: counted
    dist_info(root, "unrelated", "1.0", "flydsl-tools==1.0", "numpy")
    monkeypatch.syspath_prepend(str(root))

    reqs = {r.dist: r for r in probe.flydsl_requirements("0.3.1")}
    assert set(reqs) == {"amd-aiter", "some-tool", "sglang-ish"}  # torch-flydsl's own extra is left out
    assert reqs["amd-aiter"].specifier == "==0.3.1" and reqs["amd-aiter"].pins and reqs["amd-aiter"].satisfied
    assert reqs["amd-aiter"].line() == "amd-aiter 0.1.20 requires flydsl==0.3.1"
    assert not reqs["some-tool"].pins and reqs["some-tool"].requirement == "flydsl, any version"
    assert reqs["sglang-ish"].pins and reqs["sglang-ish"].marker == 'extra == "rocm"'
    assert [r.dist for r in probe.pinned_by(reqs.values())] == ["amd-aiter", "sglang-ish"]

    newer = {r.dist: r.satisfied for r in probe.flydsl_requirements("0.5.0")}
    assert newer == {"amd-aiter": False, "some-tool": True, "sglang-ish": False}
    assert {r.dist: r.satisfied for r in probe.flydsl_requirements(None)}["amd-aiter"] is None


def test_a_pinned_flydsl_outside_the_range_turns_the_plugin_off_with_the_pin_as_reason(image):
    info = probe.flydsl_info()
    assert info.installed and not info.usable
    assert info.reason == ("flydsl 0.3.1 is outside the supported range >=0.3.2,<0.6 and pinned by "
                           "amd-aiter 0.1.20 (flydsl==0.3.1)")


def test_one_warning_per_process_says_why_and_the_options_none_of_them_breaking_aiter(image, caplog):
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        for _ in range(3):
            probe.flydsl_info.cache_clear()  # every fresh answer, still one warning
            assert not probe.flydsl_info().usable
    (record,) = [r for r in caplog.records if r.name == "torch_flydsl"]
    msg = record.getMessage()
    assert msg.startswith("torch_flydsl is off in this process: flydsl 0.3.1 is installed and the plugin needs "
                          ">=0.3.2,<0.6, but amd-aiter 0.1.20 requires flydsl==0.3.1: keep that flydsl")
    assert "would replace it and break amd-aiter" in msg
    assert "a separate virtual environment" in msg and "wait for amd-aiter to require a flydsl in that range" in msg
    assert "python -m torch_flydsl doctor" in msg


def test_an_unpinned_flydsl_outside_the_range_warns_with_the_extra_as_the_way_out(tmp_path, monkeypatch, fresh_probe, caplog):
    root = tmp_path / "site"
    dist_info(root, "flydsl", "0.2.4")
    monkeypatch.syspath_prepend(str(root))
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        info = probe.flydsl_info()
    assert info.reason == "flydsl 0.2.4 is outside the supported range >=0.3.2,<0.6"  # as before
    (record,) = caplog.records
    assert "no installed package pins flydsl, so pip install 'torch-flydsl[flydsl]' installs one in range" in record.getMessage()


def test_a_pinned_flydsl_inside_the_range_is_used_as_it_is_and_nothing_warns(tmp_path, monkeypatch, fresh_probe, caplog):
    root = aiter_image(tmp_path / "site", flydsl="0.3.4.1", pin="flydsl==0.3.4.1")
    monkeypatch.syspath_prepend(str(root))
    with caplog.at_level(logging.WARNING, logger="torch_flydsl"):
        info = probe.flydsl_info()
    assert info.usable and info.version == "0.3.4.1" and not caplog.records
    refusal = probe.flydsl_install_refusal()  # still pinned: an installer must leave it alone
    assert refusal == ("amd-aiter 0.1.20 requires flydsl==0.3.4.1; the installed flydsl 0.3.4.1 is in the "
                       "plugin's range >=0.3.2,<0.6")


def test_a_missing_flydsl_that_another_package_requires_names_it(tmp_path, monkeypatch, fresh_probe):
    root = tmp_path / "site"
    dist_info(root, "amd-aiter", "0.1.20", "flydsl==0.3.1")
    monkeypatch.syspath_prepend(str(root))
    real = probe.importlib.util.find_spec
    monkeypatch.setattr(probe.importlib.util, "find_spec", lambda name, *a: None if name == "flydsl" else real(name, *a))
    assert probe.flydsl_info().reason == ("flydsl is not installed (required by amd-aiter 0.1.20 (flydsl==0.3.1); "
                                          "the plugin needs >=0.3.2,<0.6)")


def test_the_warning_waits_for_first_use_not_import_torch(image):
    code = textwrap.dedent(
        """
        import sys
        import torch, torch_flydsl
        assert torch_flydsl.is_enabled()
        print("imported", file=sys.stderr, flush=True)
        from torch_flydsl.serving import who_serves
        for op in ("mm", "topk", "mm"):
            assert who_serves(op, assume_gfx950=True).served_by == "pytorch"
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(image), str(REPO)])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    before, after = r.stderr.split("imported\n", 1)
    assert "torch_flydsl is off" not in before
    assert after.count("torch_flydsl is off in this process") == 1, r.stderr


def test_doctor_lists_the_pin_and_the_conflict_and_warns_nothing_besides(image):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(image), str(REPO)])}
    r = subprocess.run([sys.executable, "-m", "torch_flydsl", "doctor"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "flydsl                           0.3.1 (unsupported: flydsl 0.3.1 is outside the supported range" in out
    assert "flydsl pinned by                 amd-aiter (flydsl==0.3.1): install torch-flydsl without the [flydsl] extra" in out
    section = out.split("Who requires flydsl (installed flydsl: 0.3.1):\n", 1)[1]
    rows = [line.split() for line in section.splitlines()[2:4]]
    assert rows[0] == ["amd-aiter", "0.1.20", "flydsl==0.3.1", "yes"]
    assert rows[1][:3] == ["torch-flydsl", "0.1.0", "flydsl>=0.3.2,<0.6"] and "no (the plugin is off)" in section
    assert "pip must not change flydsl here (amd-aiter 0.1.20 requires flydsl==0.3.1; the installed flydsl 0.3.1 " \
           "is outside the plugin's range >=0.3.2,<0.6): install torch-flydsl without the [flydsl] extra." in section
    assert "torch_flydsl is off" not in r.stderr  # doctor says it itself


def test_doctor_json_has_the_requirements(image):
    from torch_flydsl import __version__, doctor

    doc = doctor._flydsl_requirements_json()
    assert doc == {"installed": "0.3.1", "pip_may_change_flydsl": False, "requirements": [
        {"distribution": "amd-aiter", "version": "0.1.20", "requires": "flydsl==0.3.1", "satisfied": True},
        {"distribution": "torch-flydsl", "version": __version__, "requires": "flydsl>=0.3.2,<0.6 (its [flydsl] extra)",
         "satisfied": False}]}


def test_doctor_without_pins_says_the_extra_is_safe():
    from torch_flydsl import doctor

    if probe.flydsl_install_refusal() is not None:
        pytest.skip("something installed here pins flydsl")
    assert doctor.flydsl_verdict().startswith("No other installed package pins flydsl")
    assert doctor.flydsl_requirement_rows()[-1][0] == "torch-flydsl"


def test_may_install_flydsl_refuses_over_a_pin(image, capsys):
    assert probe.main(["may-install-flydsl"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("amd-aiter 0.1.20 requires flydsl==0.3.1; the installed flydsl 0.3.1 is outside")
    assert "pip must not install, upgrade or downgrade flydsl here" in err


def test_may_install_flydsl_allows_without_a_pin(tmp_path, monkeypatch, capsys):
    dist_info(tmp_path / "site", "flydsl", "0.3.1")  # out of range but nobody pins it
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    if probe.flydsl_install_refusal() is not None:
        pytest.skip("something installed here pins flydsl")
    assert probe.main(["may-install-flydsl"]) == 0 and capsys.readouterr().err == ""
    assert probe.main([]) == 2


def run_setup(tmp_path: Path, site: Path) -> tuple[list[str], str]:
    """scripts/setup.sh in a copy of the repository whose .venv is a stand-in: its pip records
    what it was asked to install, its python is this one with ``site`` first on the path."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "pip.log"
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (bin_dir / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH={site}{os.pathsep}{REPO} exec {sys.executable} "$@"\n')
    lld = tmp_path / "rocm" / "llvm" / "bin" / "ld.lld"  # so that setup.sh looks for no linker
    lld.parent.mkdir(parents=True)
    lld.write_text("#!/bin/sh\n")
    for f in (bin_dir / "pip", bin_dir / "python", lld):
        f.chmod(0o755)
    r = subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ROCM_PATH": str(tmp_path / "rocm")})
    assert r.returncode == 0, r.stderr
    return log.read_text().splitlines(), r.stderr


def test_setup_installs_no_flydsl_over_a_pinned_one(tmp_path):
    site = aiter_image(tmp_path / "site")
    installs, stderr = run_setup(tmp_path, site)
    assert any(".[test-tools]" in line for line in installs)
    assert not any(".[test]" in line or "flydsl" in line for line in installs), installs
    assert "setup: not installing flydsl: amd-aiter 0.1.20 requires flydsl==0.3.1" in stderr


def test_setup_installs_flydsl_where_nothing_pins_it(tmp_path):
    if probe.flydsl_install_refusal() is not None:
        pytest.skip("something installed here pins flydsl")
    site = tmp_path / "site"
    dist_info(site, "unrelated", "1.0", "numpy")
    installs, stderr = run_setup(tmp_path, site)
    assert installs[-1].endswith("-e .[test]"), installs
    assert "not installing flydsl" not in stderr


def test_the_package_metadata_names_flydsl_only_in_extras_with_the_probes_range():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("flydsl")]  # pip install torch-flydsl keeps any flydsl
    extras = project["optional-dependencies"]
    assert extras["flydsl"] == [f"flydsl{probe.SUPPORTED_RANGE}"]
    assert not [d for d in extras["test-tools"] if d.lower().startswith("flydsl")]
    assert extras["test"] == ["torch-flydsl[flydsl,test-tools]"]


def test_a_pin_the_installed_flydsl_no_longer_meets_gets_the_command_that_restores_it(tmp_path, monkeypatch, fresh_probe):
    # `pip install 'torch-flydsl[flydsl]'` in an AITER image did this: flydsl 0.5.0 under AITER's 0.3.1 pin.
    root = aiter_image(tmp_path / "site", flydsl="0.5.0", pin="flydsl==0.3.1")
    monkeypatch.syspath_prepend(str(root))
    from torch_flydsl import doctor

    assert probe.flydsl_info().usable  # in range: the plugin runs, but AITER's kernels were built for 0.3.1
    verdict = doctor.flydsl_verdict()
    assert "The installed flydsl 0.5.0 does not meet amd-aiter 0.1.20's flydsl==0.3.1: " \
           "pip install 'flydsl==0.3.1' restores it." in verdict
    assert doctor.flydsl_requirement_rows()[0] == ("amd-aiter", "0.1.20", "flydsl==0.3.1", "no")


def test_without_packaging_requirements_are_split_as_written_and_left_undecided(monkeypatch):
    for mod in ("packaging.requirements", "packaging.specifiers", "packaging.version"):
        monkeypatch.setitem(sys.modules, mod, None)  # `from packaging.x import ...` raises ImportError
    assert probe._parse_requirement("flydsl (==0.3.1)") == ("flydsl", "==0.3.1", None, True)
    assert probe._parse_requirement('flydsl>=0.3, <0.4 ; extra == "rocm"') == ("flydsl", ">=0.3,<0.4", 'extra == "rocm"', True)
    assert probe._parse_requirement("flydsl") == ("flydsl", "", None, True)
    assert probe._satisfies("0.3.1", "==0.3.1") is None and probe._satisfies("0.3.1", "") is True


def test_inductor_asking_for_flydsl_adds_no_second_warning_for_a_pinned_flydsl(image, caplog, monkeypatch):
    """FLYDSL requested with AITER's flydsl: the probe's one warning says why and what to do; the
    Inductor offer's own "offers nothing" line for the same cause drops to info."""
    from torch_flydsl.inductor import offer

    monkeypatch.setattr(offer, "_warned_versions", set())
    with caplog.at_level(logging.INFO, logger="torch_flydsl"):
        info = probe.flydsl_info()
        offer.log_offer(offer.Offer("mm").decline("version", info.reason), "mm node")
    warnings = [r for r in caplog.records if r.name == "torch_flydsl" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].getMessage().startswith("torch_flydsl is off in this process")
    assert any(r.levelno == logging.INFO and "offers nothing" in r.getMessage() for r in caplog.records)
