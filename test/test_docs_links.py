"""README.md and docs/*.md link only to files inside this repository, and those files exist;
an anchor into a markdown file names one of its headings. The two commands of README are the
scripts that exist, and CI runs the test one."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text()))


def _slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug, n = _slug(m.group(1)), 1
            while slug in found:  # GitHub numbers repeated headings
                slug, n = f"{_slug(m.group(1))}-{n}", n + 1
            found.add(slug)
    return found


def problem(doc: Path, target: str) -> str | None:
    """Why a link target is wrong, or None when it is fine."""
    if _SCHEME.match(target):
        return None  # http(s), mailto: not a file of this repository
    file_part, _, anchor = target.partition("#")
    if file_part.startswith("/"):
        return "absolute path"
    dest = (doc.parent / file_part).resolve() if file_part else doc
    if not dest.is_relative_to(ROOT):
        return "points outside the repository"
    if not dest.exists():
        return "no such file in the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_in_the_repository(doc):
    bad = [f"{t}: {why}" for t in links(doc) if (why := problem(doc, t))]
    assert not bad, f"{doc.relative_to(ROOT)}: " + "; ".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_path_outside_the_repository_is_named(doc):
    text = doc.read_text()
    assert "../shared" not in text and "/work/" not in text


def test_the_checker_catches_bad_links(tmp_path):
    doc = ROOT / "docs" / "support.md"
    assert problem(doc, "../../shared/docs/DESIGN.md") == "points outside the repository"
    assert problem(doc, "/work/main/README.md") == "absolute path"
    assert problem(doc, "missing.md") == "no such file in the repository"
    assert problem(doc, "configuration.md#no-such-heading").startswith("no heading")
    assert problem(doc, "configuration.md") is None and problem(doc, "https://example.com/x") is None
    assert links_of("see [a](x.md) and `[b](y.md)` and\n```\n[c](z.md)\n```\n", tmp_path) == ["x.md"]


def links_of(text: str, tmp_path: Path) -> list[str]:
    p = tmp_path / "t.md"
    p.write_text(text)
    return links(p)


def test_readme_names_the_two_commands_and_ci_runs_the_test_one():
    readme = ROOT / "README.md"
    blocks = re.findall(r"^```bash\n(.*?)^```", readme.read_text(), re.S | re.M)
    commands = next(b for b in blocks if "scripts/demo.sh" in b)
    assert [line.split()[0] for line in commands.splitlines()] == ["scripts/demo.sh", "scripts/test.sh"]
    for script in ("scripts/demo.sh", "scripts/test.sh"):
        assert (ROOT / script).is_file() and (ROOT / script).stat().st_mode & 0o111
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
