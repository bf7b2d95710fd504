"""ingress/bridges/__init__.py: a dialect loaded by its name, and a bridge's target with its credential read
from the environment or a file, never echoed in an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingress.bridges import DIALECTS, CredentialsError, api_key, dialect_key, load_dialect, target_of
from ingress.bridges.anthropic import AnthropicDialect
from ingress.bridges.gemini import GeminiDialect
from ingress.bridges.openai import OpenAIDialect
from ingress.settings import Bridge


def test_each_dialect_loads_by_its_name_and_no_other_name_does() -> None:
    assert DIALECTS == ("openai", "anthropic", "gemini")
    assert isinstance(load_dialect("openai"), OpenAIDialect)
    assert isinstance(load_dialect("anthropic"), AnthropicDialect)
    assert isinstance(load_dialect("gemini"), GeminiDialect)
    for name in ("gemini_request", "eventstream", "dialect", ""):
        with pytest.raises(ValueError, match="unknown dialect"):
            load_dialect(name)


def test_a_key_from_the_environment_trimmed_and_a_missing_one_refused_by_name() -> None:
    assert api_key("KEY", None, {"KEY": "  sk-secret\n"}) == "sk-secret"
    for environ in ({}, {"KEY": "   "}):
        with pytest.raises(CredentialsError, match="the environment variable KEY is not set"):
            api_key("KEY", "/never/read", environ)
    assert api_key(None, None, {"KEY": "sk"}) is None  # no credential: none sent


def test_the_gemini_bridges_key_comes_from_googles_variables_when_none_is_named() -> None:
    assert dialect_key("gemini", None, None, {"GOOGLE_API_KEY": "g", "GEMINI_API_KEY": " k "}) == "k"
    assert dialect_key("gemini", None, None, {"GOOGLE_API_KEY": "g"}) == "g"
    assert dialect_key("gemini", None, None, {}) is None
    assert dialect_key("gemini", "MINE", None, {"MINE": "m", "GEMINI_API_KEY": "k"}) == "m"
    assert dialect_key("openai", None, None, {"GEMINI_API_KEY": "k"}) is None
    bridge = Bridge(dialect="gemini", target="https://generativelanguage.googleapis.com")
    assert target_of(bridge, {"GEMINI_API_KEY": "AIza-k"}).api_key == "AIza-k"


def test_a_key_from_a_file_and_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-from-file\n")
    assert api_key(None, str(key), {}) == "sk-from-file"
    key.write_text("\n")
    with pytest.raises(CredentialsError, match=f"the key file {key} is empty"):
        api_key(None, str(key), {})
    with pytest.raises(CredentialsError, match="cannot be read: No such file or directory") as caught:
        api_key(None, str(tmp_path / "absent"), {})
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_bridges_target() -> None:
    bridge = Bridge(dialect="anthropic", target="https://api.anthropic.com", model="claude-x", api_key_env="K",
                    max_tokens=99)
    target = target_of(bridge, {"K": "sk-ant"})
    assert (target.url, target.model, target.max_tokens, target.api_key) == (
        "https://api.anthropic.com", "claude-x", 99, "sk-ant")
    assert "sk-ant" not in repr(target)
