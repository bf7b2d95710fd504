"""Bridges: internal services that speak our contract on one side and a real engine's or provider's
API on the other. `dialect.py` says what a dialect is; `openai.py`, `anthropic.py` and `gemini.py` are the
dialects, each joining its `_request.py` (our request → the engine's) and its `_answers.py` (the engine's
answers, events and errors → ours), and `openai_embeddings.py` the OpenAI dialect's embeddings both ways;
`eventstream.py` and `failures.py` are what they share; `service.py` is the I/O around one; `ingress
bridge DIALECT` serves one alone, and an endpoint's `bridge` in the edge's config runs one in-process."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path

from ingress.bridges.dialect import Dialect, Target
from ingress.settings import Bridge

DIALECTS = ("openai", "anthropic", "gemini")
# A dialect's key from the environment when none is named: the variables its provider's own SDKs read.
DEFAULT_KEY_ENV = {"gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY")}


class CredentialsError(Exception):
    """A bridge's credentials could not be read: the process must not start without them."""


def load_dialect(name: str) -> Dialect:
    """The dialect named `name` (its module's `DIALECT`)."""
    if name not in DIALECTS:
        raise ValueError(f"unknown dialect {name!r}")
    dialect: Dialect = importlib.import_module(f"ingress.bridges.{name}").DIALECT
    return dialect


def api_key(env: str | None, file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The credential named by an environment variable or a file; never logged, never in an error."""
    environ = os.environ if environ is None else environ
    if env is not None:
        value = environ.get(env, "").strip()
        if not value:
            raise CredentialsError(f"the environment variable {env} is not set")
        return value
    if file is not None:
        try:
            value = Path(file).read_text().strip()
        except OSError as exc:
            raise CredentialsError(f"the key file {file} cannot be read: {exc.strerror}") from None
        if not value:
            raise CredentialsError(f"the key file {file} is empty")
        return value
    return None


def dialect_key(dialect: str, env: str | None, file: str | None,
                environ: Mapping[str, str] | None = None) -> str | None:
    """As `api_key`; with neither named, the first of the dialect's own variables (DEFAULT_KEY_ENV) that is set."""
    if env is not None or file is not None:
        return api_key(env, file, environ)
    environ = os.environ if environ is None else environ
    return next((value for name in DEFAULT_KEY_ENV.get(dialect, ()) if (value := environ.get(name, "").strip())),
                None)


def target_of(bridge: Bridge, environ: Mapping[str, str] | None = None) -> Target:
    return Target(url=bridge.target, model=bridge.model, max_tokens=bridge.max_tokens,
                  api_key=dialect_key(bridge.dialect, bridge.api_key_env, bridge.api_key_file, environ))
