"""The configuration the README documents is the one in deploy/, and it is valid."""

from __future__ import annotations

import re
from pathlib import Path

from ingress.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "ingress.toml"


def _readme_tomls() -> list[str]:
    return [str(b) for b in re.findall(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)]


def _example_body() -> str:
    return EXAMPLE.read_text().split("\n\n", 1)[1]  # the file's own header comment is not in the README


def _readme_toml() -> str:
    """The README's configuration reference: the TOML block that begins as the deploy example does."""
    [block] = [b for b in _readme_tomls() if b.split("\n", 1)[0] == _example_body().split("\n", 1)[0]]
    return block


GUARDRAILS_EXAMPLE = "[tenancy.tenants.acme.guardrails]\n"


def test_every_toml_block_in_the_readme_is_a_valid_configuration() -> None:
    for block in _readme_tomls():
        parse_config(block)


def test_the_guardrails_example_is_in_the_readme() -> None:
    assert [b for b in _readme_tomls() if b.startswith(GUARDRAILS_EXAMPLE)]


def test_readme_example_is_the_deploy_example() -> None:
    assert _readme_toml().strip() == _example_body().strip()


def test_the_example_is_valid() -> None:
    settings = load_config(EXAMPLE)
    groups, routes = settings.resolved()
    assert set(groups) == {"primary", "local"}
    assert sum(len(g.endpoints) for g in groups.values()) == 3
    assert [r.model or r.prefix or r.glob for r in routes] == ["gpt-4o", "llama-", "*-mini"]
    assert parse_config(_readme_toml()) == settings
