"""Prompt token counts at the edge, before a request is sent: what admission reserves and the passport carries.

`counter_for(model, tokenizer)` gives the model's `TokenCounter`: `.chat(request)` for a chat request,
`.texts(prompts)` for legacy completion prompts and embeddings inputs (a token-id list counts its length).

**Exact only where it is needed.** The pipeline (pipeline/prepare.py `counts_exactly`) asks for the exact
count only when the key's plan charges the prompt's tokens (tpm, input_tpm, a token budget, a USD budget
with an input price) or a guardrail's max_prompt_tokens reads them (tenancy/policy.py `counts_prompt`);
every other request, and every request without `[tenancy]`, is counted with the estimate (`exact=False`),
which the passport then carries: an upper bound is all a service needs to plan by. Counted exactly, a
text is looked up first by its content's hash in its engine's `CountCache` (cache.py), so a conversation
sent again with one more turn costs the count of that turn; what is counted never depends on the cache.

**Which tokenizer.** A route's `tokenizer` ("o200k", "cl100k" or a tokenizer.json path) wins; otherwise
OpenAI's own table (tiktoken's model.py, 0.14.0) picks o200k for gpt-4o*, chatgpt-4o*, gpt-4.1*, gpt-4.5*,
gpt-5*, o1*, o3*, o4*, gpt-oss-*, and cl100k for gpt-4*, gpt-3.5*, text-embedding-3*, text-embedding-ada-002
(and their ft: names). Both vocabularies come from bpe-openai, offline; its vocabulary files are byte for
byte tiktoken's (their SHA-256 is the one tiktoken checks), and tests/unit/test_tokens.py checks its counts
against tiktoken's. A tokenizer.json needs the optional `tokenizers` package (`ingress[tokenizers]`): its
wheel is 3.4 MB and its import 38 ms and 8 MB, but it brings huggingface_hub and ten more packages
(~45 MB installed) the edge never uses, so it is not a dependency of every install. Any other model gets
the estimate (`.exact` is False).

**A chat request** counts as OpenAI's cookbook (`num_tokens_from_messages`) does, which matches the
prompt_tokens OpenAI answers for text messages (124 for its example on gpt-4o, 129 on gpt-4): 3 per
message, plus its role and content, plus its name and 1; plus 3 for the primed reply. Exact for text.
Approximations, each documented where it is made (chat.py, images.py):
- tools: the cookbook's `num_tokens_for_tools` (func_init 7 on o200k, 10 on cl100k; 3 per property list,
  3 per property, enum -3 + 3 per value, 12 at the end), exact for flat parameters (101 and 105 on its
  example); nested schemas and other keywords add their JSON text; custom tools add their grammar;
- an assistant's tool calls: their name and arguments, plus 3 each; a tool message's tool_call_id counts;
- images: OpenAI's tile formula (85 + 170 per 512 px tile after the scalings; gpt-4o-mini 2833 + 5667) when
  the detail is low or the size is read from a data: URL's PNG/GIF/WebP/JPEG header; else its maximum,
  8 tiles (1445 tokens on gpt-4o);
- audio: 10 tokens per second, the duration bounded from the data's size at low bitrates; files: one token
  per 4 bytes of data, 1000 for a file by id; a json_schema response format: its text;
- other models: 4 per message around the role, 4 priming (ChatML and Llama 3 both add 4).

**The estimate** is an upper bound from a text's UTF-8 bytes, by class: ASCII letters and whitespace 0.3,
other ASCII (digits, punctuation) 1.0, non-ASCII bytes 0.8 tokens per byte, plus 1. Measured against o200k, cl100k and
SmolLM2's tokenizer (its GGUF's vocabulary, which matched llama-server's /tokenize on 52 texts) it is above
each on the corpus: English (the README, 45 kB) 1.53x / 1.53x / 1.34x; Python (ingress/*.py, 99 kB)
1.66 / 1.67 / 1.44; JSON 1.54 / 1.53 / 1.30; Chinese, Japanese and Korean 2.96 / 2.09 / 1.26; Cyrillic,
Greek, Arabic, Devanagari, Thai, accented Latin 4.03 / 2.05 / 1.48; emoji (ZWJ sequences, flags, skin
tones) 1.71 / 1.23 / 1.12 (tests/fixtures/tokens/). It is no bound for random data, whose tokens are up to
(the most of the three tokenizers) 2.9x its figure for whitespace-heavy text, 2.4x for random letters, 1.9x
for base64, 1.7x for one-letter words, 1.4x for random ASCII, 1.2x for hex, UUIDs and random Unicode, 1.1x
for JSON lists of numbers (SmolLM2 splits digits); admission reconciles every reservation from the usage the
service answers.

**Bounded cost.** Measured here (2 shared cores, nice 10, thread CPU time; bench/tokens.py, results in
bench/results/tokens.json): bpe-openai counts English at 8-21 MB/s (64 KiB in 3.4-7.3 ms), a 1M-character
word of random letters at 4.5-9 MB/s, 2 MB of random Unicode at 11-18 MB/s, 2 MB of one character at
50-80 MB/s; a tokenizer.json (SmolLM2's, by `tokenizers`) at 0.3-1.3 MB/s; the estimate at 200-500 MB/s
on English (2 MB in 4-7 ms), 300-1700 MB/s on the adversarial bodies. So one request's texts are counted
exactly up to `max_exact_count_bytes` of UTF-8 (32 KiB by default: 1.6-3.5 ms of English, ~4-7 ms at worst;
a tokenizer.json gets an eighth of it), in order: the text that crosses the limit is counted exactly up to
it and estimated past it, and every text after it is estimated. A text found in the `CountCache` spends
its bytes of the limit as if it were counted, so the limit cuts at the same byte and the total is the
same with the cache as without it (the cache saves the time, never changes the count); a text cut by the
limit is never put in the cache, only texts counted whole. A 2 MB body then costs 2-15 ms (the
largest, the default 8 MiB, ~4 times that: about what decoding its JSON costs), where the exact count
took 40-190 ms.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from ingress.oai.chat import ChatCompletionRequest
from ingress.tokens.cache import SHORT, CountCache, short_count
from ingress.tokens.chat import CL100K, O200K, OTHER, Format, count_chat
from ingress.tokens.engines import Engine, engine, estimate, estimate_bytes, tokenizer_problem, vocabulary_of
from ingress.tokens.images import tile_costs

__all__ = ["MAX_EXACT_COUNT_BYTES", "CountCache", "TokenCounter", "count_cache", "counter_for", "estimate",
           "tokenizer_problem"]

MAX_EXACT_COUNT_BYTES = 32 * 1024


class _Budget:
    """One request's counting: exact while its bytes last, the estimate after. A text counted whole is
    looked up in its engine's `CountCache` first; it spends the budget all the same, so the limit cuts at
    the same byte whatever was counted before, and the total is the one counting every text would give."""

    __slots__ = ("_cache", "_engine", "left")

    def __init__(self, engine: Engine | None, limit: int, cache: CountCache | None = None) -> None:
        self._engine = engine
        self._cache = cache
        self.left = limit // engine.slowdown if engine is not None else 0

    def __call__(self, text: str) -> int:
        engine, left = self._engine, self.left
        if engine is None or left <= 0 or not text:
            return estimate(text)  # 0 for ""
        if text.isascii():
            data, size = None, len(text)
        else:
            data = text.encode("utf-8", "surrogatepass")
            size = len(data)
        if size <= left:
            self.left = left - size
            return engine.count(text) if self._cache is None else self._cache.count(engine, text, data)
        self.left = 0
        if data is None:  # cut at the limit
            return engine.count(text[:left]) + estimate(text[left:])
        # cut at the limit's byte: a character it splits goes to the estimate
        return engine.count(data[:left].decode("utf-8", "ignore")) + estimate_bytes(data[left:])


_short: dict[str, int] = {}  # the estimates of texts of SHORT characters or fewer


def _estimated(text: str) -> int:
    """`estimate`, remembered for short texts: every message counts its role, and each estimate costs
    ~1.3 µs however short its text (two bytes.translate calls), ~30% of a 16 KB request's count."""
    return estimate(text) if len(text) > SHORT else short_count(_short, text, estimate)


class TokenCounter:
    """A model's prompt counts. `exact`: a real tokenizer counts (up to the size limit), not the estimate.
    Each method takes `exact=False` for the estimate alone, whatever the model: what a request no token
    limit governs is counted with (see the package's docstring)."""

    def __init__(self, name: str, engine: Engine | None, fmt: Format, max_exact_bytes: int,
                 cache: CountCache | None = None) -> None:
        self.name = name
        self.exact = engine is not None
        self._engine = engine
        self._format = fmt
        self._limit = max_exact_bytes
        self._cache = cache
        self._functions: dict[tuple[str, str | None, bytes], int] = {}  # the estimate's, by definition

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, exact={self.exact})"

    def load(self) -> None:
        """Builds the engine now (a vocabulary is otherwise built by its first exact count)."""
        if self._engine is not None:
            self._engine.load()

    def _budget(self) -> _Budget:
        return _Budget(self._engine, self._limit, self._cache)

    def text(self, text: str, exact: bool = True) -> int:
        return self._budget()(text) if exact else estimate(text)

    def texts(self, prompts: list[str | list[int]], exact: bool = True) -> int:
        """Texts counted, token-id lists by their length."""
        count = self._budget() if exact and self._engine is not None else _estimated
        return sum(len(p) if isinstance(p, list) else count(p) for p in prompts)

    def chat(self, request: ChatCompletionRequest, exact: bool = True) -> int:
        if self._engine is None or not exact:  # the estimate depends on the text alone: what repeats is remembered
            return count_chat(request, _estimated, self._format, self._functions)
        return count_chat(request, self._budget(), self._format)


@lru_cache(maxsize=1024)  # bounded: a glob route passes on whatever model name a client sends
def counter_for(model: str, tokenizer: str | None = None, max_exact_bytes: int = MAX_EXACT_COUNT_BYTES) -> TokenCounter:
    """The counter for `model` (the name sent upstream), by the route's `tokenizer` if it names one.
    Vocabularies are built once per process, by `.load()` or the first exact count (o200k ~95 ms, cl100k ~42 ms)."""
    name = tokenizer or vocabulary_of(model)
    if name is None:
        return TokenCounter("estimate", None, OTHER, max_exact_bytes)
    costs = tile_costs(model)
    fmt = O200K if name == "o200k" else CL100K if name == "cl100k" else OTHER
    if costs != fmt.image_costs:
        fmt = dataclasses.replace(fmt, image_costs=costs)
    return TokenCounter(name, engine(name), fmt, max_exact_bytes, count_cache(name))


@lru_cache(maxsize=64)  # one per vocabulary or tokenizer.json a route names
def count_cache(tokenizer: str) -> CountCache:
    """The exact counts remembered for one engine (a vocabulary's name or a tokenizer.json's path), shared
    by every model and route that counts with it."""
    return CountCache()
