"""The configuration the documentation shows is valid, and its reference is the one in deploy/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingress.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "ingress.toml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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
def test_every_toml_block_on_the_page_is_a_valid_configuration(page: str) -> None:
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
