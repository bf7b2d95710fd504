"""The documentation holds together: every configuration it shows is valid, the reference it gives is the
one in deploy/, and every link between its pages leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingress.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "ingress.toml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*PAGES, ROOT / "bench" / "README.md", *sorted((ROOT / "bench" / "notes").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
_ANCHOR_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _tomls(page: Path) -> list[str]:
    return [str(b) for b in re.findall(r"```toml\n(.*?)```", page.read_text(), re.DOTALL)]


def _all_tomls() -> list[tuple[str, str]]:
    return [(_name(page), block) for page in PAGES for block in _tomls(page)]


def _example_body() -> str:
    return EXAMPLE.read_text().split("\n\n", 1)[1]  # the file's own header comment is not in the docs


def _reference_toml() -> str:
    """The configuration reference: the one TOML block, on any page, that begins as the deploy example does."""
    first = _example_body().split("\n", 1)[0]
    [block] = [b for _, b in _all_tomls() if b.split("\n", 1)[0] == first]
    return block


GUARDRAILS_EXAMPLE = "[tenancy.tenants.acme.guardrails]\n"


@pytest.mark.parametrize("page", [_name(p) for p in PAGES])
def test_every_toml_block_on_the_page_is_a_valid_configuration(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="  # the variables the examples name, as an operator sets them
    monkeypatch.setenv("INGRESS_STATE_SEAL_KEY", key)
    monkeypatch.setenv("INGRESS_STATE_SEAL_OLD_KEYS", key)
    for block in _tomls(ROOT / page):
        parse_config(block)


def test_the_pages_show_configuration() -> None:
    """The check above must not pass by finding nothing: the pages hold the examples they always held."""
    pages = {page for page, _ in _all_tomls()}
    assert {"docs/configuration.md", "docs/keys-and-limits.md", "docs/guardrails.md", "docs/bridges.md"} <= pages


def test_the_guardrails_example_is_on_the_guardrails_page() -> None:
    assert [b for b in _tomls(ROOT / "docs" / "guardrails.md") if b.startswith(GUARDRAILS_EXAMPLE)]


def test_the_reference_is_the_deploy_example() -> None:
    assert _reference_toml().strip() == _example_body().strip()


def test_the_example_is_valid() -> None:
    settings = load_config(EXAMPLE)
    groups, routes = settings.resolved()
    assert set(groups) == {"primary", "local"}
    assert sum(len(g.endpoints) for g in groups.values()) == 3
    assert [r.model or r.prefix or r.glob for r in routes] == ["gpt-4o", "llama-", "*-mini"]
    assert parse_config(_reference_toml()) == settings


# --- links --------------------------------------------------------------------------------------------


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(page.read_text()):
        found.update(_ANCHOR_ID.findall(line))
        if heading := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(heading.group(1))
            found.add(base if base not in seen else f"{base}-{seen[base]}")  # GitHub numbers repeats
            seen[base] = seen.get(base, 0) + 1
    return found


def test_slug_follows_github() -> None:
    assert slug("soak.py: 1,000 connections for 30 minutes, faults injected") \
        == "soakpy-1000-connections-for-30-minutes-faults-injected"
    assert slug("`POST /v1/chat/completions`") == "post-v1chatcompletions"
    assert slug("3. What is counted") == "3-what-is-counted"
    assert slug("A fleet with keys and limits") == "a-fleet-with-keys-and-limits"


def _links(page: Path) -> list[str]:
    return [target for line in _prose(page.read_text()) for target in _LINK.findall(line)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked


@pytest.mark.parametrize("page", [_name(p) for p in LINKED])
def test_every_relative_link_leads_to_a_file_and_anchor_that_exist(page: str) -> None:
    source = ROOT / page
    broken = []
    for target in _links(source):
        path, _, anchor = target.partition("#")
        dest = (source.parent / path).resolve() if path else source
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such anchor in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_finds_links() -> None:
    """The check above must not pass by reading none: the README leads into every page of docs/."""
    assert {t.partition("#")[0] for t in _links(ROOT / "README.md")} >= {_name(p) for p in PAGES[1:]}
