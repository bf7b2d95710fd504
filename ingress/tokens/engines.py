"""What counts the tokens of one text: OpenAI's vocabularies (bpe-openai), a tokenizer.json, or the estimate."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import string
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from ingress.tokens.pages import release_clean_pages

# Names a route may give as `tokenizer`, and the bpe-openai vocabulary each one is.
VOCABULARIES = {"o200k": "o200k_base", "cl100k": "cl100k_base"}

# tiktoken's own table (tiktoken/model.py, 0.14.0): exact names first, then prefixes in its order.
# gpt-oss's o200k_harmony has o200k_base's ranks and pattern; only its special tokens differ.
_MODELS = {
    "o1": "o200k", "o3": "o200k", "o4-mini": "o200k", "gpt-5": "o200k", "gpt-4.1": "o200k", "gpt-4o": "o200k",
    "gpt-4": "cl100k", "gpt-3.5-turbo": "cl100k", "gpt-3.5": "cl100k", "gpt-35-turbo": "cl100k",
    "davinci-002": "cl100k", "babbage-002": "cl100k", "text-embedding-ada-002": "cl100k",
    "text-embedding-3-small": "cl100k", "text-embedding-3-large": "cl100k",
}
_PREFIXES = (
    ("o1-", "o200k"), ("o3-", "o200k"), ("o4-mini-", "o200k"), ("gpt-5", "o200k"), ("gpt-4.5-", "o200k"),
    ("gpt-4.1-", "o200k"), ("chatgpt-4o-", "o200k"), ("gpt-4o-", "o200k"), ("gpt-4-", "cl100k"),
    ("gpt-3.5-turbo-", "cl100k"), ("gpt-35-turbo-", "cl100k"), ("gpt-oss-", "o200k"),
    ("ft:gpt-4o", "o200k"), ("ft:gpt-4", "cl100k"), ("ft:gpt-3.5-turbo", "cl100k"), ("ft:davinci-002", "cl100k"),
    ("ft:babbage-002", "cl100k"),
    ("o4-", "o200k"), ("gpt-4.5", "o200k"), ("text-embedding-3-", "cl100k"),  # newer names tiktoken has no row for
)


def vocabulary_of(model: str) -> str | None:
    """The vocabulary OpenAI uses for `model` ("o200k", "cl100k"), or None for any other model."""
    if model in _MODELS:
        return _MODELS[model]
    return next((vocabulary for prefix, vocabulary in _PREFIXES if model.startswith(prefix)), None)


class Engine(Protocol):
    """Counts one text's tokens; `slowdown` is how much slower than bpe-openai it runs (its byte budget
    is the exact-count limit divided by it). `load` builds what counting needs, if it is not built yet."""

    slowdown: int

    def count(self, text: str) -> int: ...

    def load(self) -> None: ...


class _Rust(Protocol):
    def count(self, text: str) -> int: ...


def _bindings() -> Any:  # the extension ships no stubs: its two calls are typed by _Rust
    """bpe-openai's Rust extension, loaded on its own: importing the `bpe_openai` package decodes all three
    of its vocabularies into Python dicts (measured 1.0 s and ~65 MB per process), which counting never
    reads. The extension holds its own copy of the vocabularies."""
    name = "bpe_openai._bindings"
    if name in sys.modules:  # PyO3 initialises a module once per process
        return sys.modules[name]
    spec = importlib.util.find_spec("bpe_openai")  # finds the package without running its __init__
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    paths = [folder / f"_bindings{s}" for s in importlib.machinery.EXTENSION_SUFFIXES] if folder else []
    path = next((p for p in paths if p.is_file()), None)
    if path is None:  # another layout: the package's own import, slow but right
        return importlib.import_module(name)
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert module_spec is not None
    module: ModuleType = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


class Vocabulary:
    """One of OpenAI's vocabularies, by bpe-openai (GitHub's `bpe` crate), which counts as tiktoken does.
    Built by `load`, or by the first count: o200k's tables are ~34 MB of a worker's memory, which a
    worker that never counts with it does not hold (serve/app.py loads at start what will be counted).
    Building reads the vocabulary's serialized form from the extension's read-only data (31 MB more of
    RSS for o200k, 15 MB for cl100k); those pages are released once it is built (pages.py)."""

    slowdown = 1

    def __init__(self, name: str) -> None:
        self.name = name
        self._rust: _Rust | None = None

    def load(self) -> None:
        if self._rust is None:
            bindings = _bindings()
            self._rust = bindings.tokenizer_for_encoding(VOCABULARIES[self.name])
            # the serialized vocabulary it was built from is never read again: its pages leave the RSS
            release_clean_pages(bindings.__file__)

    def count(self, text: str) -> int:
        rust = self._rust
        if rust is None:
            self.load()
            rust = self._rust
            assert rust is not None
        try:
            return rust.count(text)
        except UnicodeEncodeError:  # a lone surrogate: replaced, as tiktoken does
            return rust.count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


class TokenizerFile:
    """A Hugging Face tokenizer.json, by the `tokenizers` package (the optional extra `ingress[tokenizers]`)."""

    slowdown = 8  # measured 1.0-1.3 MB/s on English for SmolLM2's, against 9-16 MB/s for bpe-openai's o200k

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer  # optional: only a route naming a file needs it

        self.name = path
        self._tokenizer = Tokenizer.from_file(path)

    def load(self) -> None:  # read whole when made: a file that does not load stops the start (check-config)
        pass

    def count(self, text: str) -> int:
        try:
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
        except TypeError:  # "TextInputSequence must be str": its word for a lone surrogate
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


@cache
def vocabulary(name: str) -> Vocabulary:
    """One per vocabulary and process, built on `load` or its first count: o200k takes ~60-95 ms and keeps
    ~34 MB, cl100k ~20-42 ms and ~16 MB."""
    return Vocabulary(name)


@cache
def tokenizer_file(path: str) -> TokenizerFile:
    return TokenizerFile(path)


def engine(tokenizer: str) -> Engine:
    """The engine a route's `tokenizer` names: a vocabulary, or a tokenizer.json path."""
    return vocabulary(tokenizer) if tokenizer in VOCABULARIES else tokenizer_file(tokenizer)


def is_path(tokenizer: str) -> bool:
    return "/" in tokenizer or tokenizer.endswith(".json")


def tokenizer_problem(tokenizer: str) -> str | None:
    """Why a route's `tokenizer` cannot be used (for check-config), or None: it loads."""
    if tokenizer in VOCABULARIES:
        return None
    if not is_path(tokenizer):
        return f"unknown tokenizer {tokenizer!r}: give one of {', '.join(VOCABULARIES)} or a tokenizer.json path"
    if not Path(tokenizer).is_file():
        return f"cannot read the tokenizer file {tokenizer!r}"
    try:
        tokenizer_file(tokenizer)
    except ImportError:
        return "a tokenizer.json needs the tokenizers package: pip install 'ingress[tokenizers]'"
    except Exception as exc:  # the tokenizers package raises its own Exception for a file it cannot read
        return f"cannot load the tokenizer file {tokenizer!r}: {exc}"
    return None


# --- the estimate ---------------------------------------------------------------------------------

# Each UTF-8 byte of a text is in one of three classes; its weight is an upper bound of the tokens per
# byte of that class measured on the corpus (see the package's docstring).
_WORDS = (string.ascii_letters + string.whitespace).encode()  # 0.3
_OTHER_ASCII = bytes(i for i in range(128) if i not in _WORDS)  # digits, punctuation, controls: 1.0
# and every byte of a non-ASCII character: 0.8


def estimate(text: str) -> int:
    """An upper bound of a text's tokens for any of the measured tokenizers, from its bytes' classes:
    each class's bytes are deleted in turn, in C (~250 MB/s here; 2 MB in 8 ms)."""
    return estimate_bytes(text.encode("utf-8", "surrogatepass")) if text else 0


def estimate_bytes(data: bytes) -> int:
    """The estimate of the text whose UTF-8 is `data`."""
    rest = data.translate(None, _WORDS)
    non_ascii = 0 if rest.isascii() else len(rest.translate(None, _OTHER_ASCII))
    return 1 + int(0.3 * (len(data) - len(rest)) + 1.0 * (len(rest) - non_ascii) + 0.8 * non_ascii)
