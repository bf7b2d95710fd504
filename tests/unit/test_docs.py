"""The configuration the README documents is the one in deploy/, and it is valid."""

from __future__ import annotations

import re
from pathlib import Path

from ingress.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "ingress.toml"


def _readme_toml() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert len(blocks) == 1
    return str(blocks[0])


def test_readme_example_is_the_deploy_example() -> None:
    body = EXAMPLE.read_text().split("\n\n", 1)[1]  # the file's own header comment is not in the README
    assert _readme_toml().strip() == body.strip()


def test_the_example_is_valid() -> None:
    settings = load_config(EXAMPLE)
    groups, routes = settings.resolved()
    assert set(groups) == {"primary", "local"}
    assert sum(len(g.endpoints) for g in groups.values()) == 3
    assert [r.model or r.prefix or r.glob for r in routes] == ["gpt-4o", "llama-", "*-mini"]
    assert parse_config(_readme_toml()) == settings
