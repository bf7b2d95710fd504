"""What a request sent to Google's Gemini API costs the edge beside the same conversation sent as chat: CPU per
request (its decode, its reading as chat, the whole of prepare, for a route anywhere and for one to Google,
whole) and per streamed chunk, and the answer's translation, side by side in one run; and Google's embeddings
(`batchEmbedContents`) beside the same texts sent to `/v1/embeddings`.

    nice -n 10 .venv/bin/python -m bench gemini [--quick] [--rounds 7] [--out FILE]
        -> results/gemini.json (~1 min; --quick ~20 s, results/gemini-quick.json)

The conversation is payloads.py's 16 KB, 11-message chat request with a tool (max tokens 64), sent to
`/v1/chat/completions` as it is and to `:generateContent` as `gemini_request` translates it (the system prompt
as `systemInstruction`, the turns as `contents` with `user` and `model` roles, the tool as a function
declaration with `parametersJsonSchema`, temperature and maxOutputTokens in `generationConfig`); the run first
checks that the edge reads the Gemini body as exactly the chat request. Both model names: gpt-4o and
llama-3.1-8b-instruct, behind an edge whose key has rpm and tpm limits (never reached), so gpt-4o's prompt is
counted exactly (o200k) and llama's estimated, as bench/messages.py runs them.

In process, each stage timed as bench/stages.py times them (thread CPU, calibrated loops, GC off; the stages
in a random order each round, each one's chat and Gemini calls back to back, which first alternating): the
request's decode (and for Gemini its reading as chat), the whole of `prepare` against `prepare_gemini` for each
name, and for a route to Google (the request carried whole beside its reading, `gemini_json`), the answer's
translation and JSON, a streamed token's frame read in place, and its event rendered and framed. The
embeddings: 16 texts of 64 words (bench/bridge_embeddings.py's) to text-embedding-3-small (counted exactly,
cl100k) and BAAI/bge-m3 (estimated), the whole of `prepare_embeddings` against `prepare_gemini_embeddings` (the
run first checks that both read as one request), and a 16 x 1024 answer translated and written as JSON (floats,
which Google's clients get). What they leave out is the edge's structure around them (sockets, tasks), which is
the same for both APIs: bench/messages.py measures it, for Messages, with a real edge process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, chat_request, words  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import niced, result_path, write_result  # noqa: E402

MODELS = (OPENAI_MODEL, OPEN_MODEL)
APIS = ("chat", "gemini")
SIZE = 16 * 1024
MAX_TOKENS = 64
GOOGLE_ROUTE = "gemini-2.5-flash"  # a route to Google (provider "gemini"): the request travels whole too
# Embeddings: bench/bridge_embeddings.py's models (cl100k counts the first exactly, the second is estimated) and
# its 16 texts of 64 words, embedded at bge-m3's 1024 dimensions.
EMBEDDERS = ("text-embedding-3-small", "BAAI/bge-m3")
TEXTS = [words(64, seed=100 + i) for i in range(16)]
DIMENSIONS = 1024


def embeddings_bodies(model: str) -> tuple[bytes, bytes]:
    """The 16 texts as OpenAI's clients send them (floats asked), and as Google's SDK sends them."""
    openai = {"model": model, "input": TEXTS, "encoding_format": "float"}
    google = {"requests": [{"model": f"models/{model}", "content": {"parts": [{"text": t}]}} for t in TEXTS]}
    return msgspec.json.encode(openai), msgspec.json.encode(google)


def gemini_request(model: str) -> bytes:
    """`chat_request(SIZE)` as Google's clients send it: the same system prompt, turns, tool and settings."""
    chat = msgspec.json.decode(chat_request(SIZE, max_tokens=MAX_TOKENS, model=model))
    system, *turns = chat["messages"]
    contents = [{"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
                for m in turns]
    declarations = [{"name": t["function"]["name"], "description": t["function"]["description"],
                     "parametersJsonSchema": t["function"]["parameters"]} for t in chat["tools"]]
    return msgspec.json.encode({
        "contents": contents, "systemInstruction": {"parts": [{"text": system["content"]}]},
        "tools": [{"functionDeclarations": declarations}],
        "generationConfig": {"temperature": chat["temperature"], "maxOutputTokens": MAX_TOKENS}})


def check_translation() -> None:
    """The Gemini bodies are read as exactly the chat bodies' requests, with nothing dropped."""
    from ingress.gemini.contents_codec import decode_generate_content
    from ingress.gemini.contents_to_chat import as_chat
    from ingress.oai.codec import decode_chat_request

    for model in MODELS:
        read = as_chat(decode_generate_content(gemini_request(model)), model)
        chat = decode_chat_request(chat_request(SIZE, max_tokens=MAX_TOKENS, model=model))
        chat = msgspec.structs.replace(chat, max_completion_tokens=chat.max_tokens, max_tokens=None)
        if read.request != chat or read.dropped:
            raise SystemExit(f"the Gemini body ({model}) is not read as the chat body")
    from ingress.gemini.embeddings import read_embed
    from ingress.oai.embeddings import decode_embedding_request

    for model in EMBEDDERS:
        openai, google = embeddings_bodies(model)
        request, dropped = read_embed(google, model, batch=True)
        expected = msgspec.structs.replace(decode_embedding_request(openai), encoding_format=None)
        if request != expected or dropped:
            raise SystemExit(f"the batchEmbedContents body ({model}) is not read as the embeddings body")


def stage_pairs() -> dict[str, tuple[Callable[[], object] | None, Callable[[], object]]]:
    """Each stage that differs, as (chat's call, Gemini's call) on the data it gets in the edge."""
    from array import array

    from multidict import CIMultiDict

    from bench.tenancy import mock_answer
    from ingress import pipeline, wire
    from ingress.edge.sse import GeminiSseWriter, SseWriter
    from ingress.edge.writers import json_response
    from ingress.encoding.passport import RequestMeta
    from ingress.exchange import Exchange
    from ingress.gemini.contents_codec import decode_generate_content
    from ingress.gemini.contents_to_chat import as_chat
    from ingress.oai.codec import decode_chat_request_forwarding
    from ingress.routing.budget import RetryBudget
    from ingress.routing.table import RouteTable
    from ingress.settings import Route, Settings
    from ingress.sockets import chunk
    from ingress.tenancy import build
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant
    from ingress.translate.completion import translate_response
    from ingress.translate.embeddings import translate_embeddings, translate_gemini_embeddings
    from ingress.translate.gemini import GeminiStreamTranslator, response_from_answer
    from ingress.translate.stream import StreamTranslator
    from ingress.wire.answer import decode_answer

    secret, key_id, key_hash = new_key()  # as bench/stages.py: rpm and tpm on the key, tpm on its tenant
    key = Key(id=key_id, tenant="t", hash=key_hash, limits=Limits(rpm=10**9, tpm=10**12))
    tenancy = build(Tenancy(keys=(key,), tenants={"t": Tenant(limits=Limits(tpm=10**12))}), 1)
    routes = (*(Route(model=m, group="main") for m in (*MODELS, *EMBEDDERS)),
              Route(model=GOOGLE_ROUTE, group="main", provider="gemini", upstream_model=OPENAI_MODEL))
    settings = Settings(upstream="http://127.0.0.1:1", routes=routes)
    gateway = pipeline.Gateway(settings=settings, routes=RouteTable(settings.resolved()[1]), groups={},
                               budget=RetryBudget(0.2, 10, 0.0), tenancy=tenancy)
    principal = tenancy.policy.authenticate(CIMultiDict({"Authorization": f"Bearer {secret}"}))
    meta = RequestMeta()

    def new_exchange() -> Exchange:
        exchange = Exchange("0123456789abcdef0123456789abcdef")
        exchange.principal = principal
        return exchange

    chat_body, gemini_body = chat_request(SIZE, max_tokens=MAX_TOKENS, model=OPENAI_MODEL), gemini_request(OPENAI_MODEL)
    decoded = decode_generate_content(gemini_body)
    response = decode_answer(bytes(wire.write_response(mock_answer())))
    completion = translate_response(response)
    answer = response_from_answer(response, id="0123456789abcdef", model=OPENAI_MODEL)

    head = bytes(wire.write_chunk(wire.Chunk(sequence=0, id="chatcmpl-x", model="m", created=1, role="assistant",
                                             content="")))
    frame = bytes(wire.write_chunk(wire.Chunk(sequence=1, content=" token")))
    chat_stream = StreamTranslator(id="chatcmpl-0123456789abcdef", model=OPENAI_MODEL, created=1, include_usage=True)
    gemini_stream = GeminiStreamTranslator(id="0123456789abcdef", model=OPENAI_MODEL)
    for t in (chat_stream, gemini_stream):
        t.read_frame(head)
        t.read_frame(frame)

    def read(t: Any) -> list[Any]:  # either translator
        t._next_sequence, t.output = 1, []  # the frame is always the stream's next one
        chunks: list[Any] = t.read_frame(frame)
        return chunks

    delta, event = read(chat_stream)[0], read(gemini_stream)[0]
    sse, google = SseWriter(), GeminiSseWriter()
    # 16 vectors as a service's answer decodes them: float32 values, each read back as a Python float
    vectors = [array("f", [((i * 31 + j * 17) % 2001 - 1000) / 1001.0 for j in range(DIMENSIONS)]).tolist()
               for i in range(len(TEXTS))]
    embedded = wire.Embeddings(model=EMBEDDERS[1], vectors=vectors, usage=wire.Usage(prompt_tokens=1280,
                                                                                      total_tokens=1280))

    def prepare(model: str, route: str) -> tuple[Callable[[], object], Callable[[], object]]:
        chat, gemini = chat_request(SIZE, max_tokens=MAX_TOKENS, model=model), gemini_request(model)
        return (lambda: pipeline.prepare(gateway, chat, meta, new_exchange()),
                lambda: pipeline.prepare_gemini(gateway, gemini, meta, new_exchange(), model=route, stream=False))

    def embed(model: str) -> tuple[Callable[[], object], Callable[[], object]]:
        openai, google = embeddings_bodies(model)
        return (lambda: pipeline.prepare_embeddings(gateway, openai, meta, new_exchange()),
                lambda: pipeline.prepare_gemini_embeddings(gateway, google, meta, new_exchange(), model=model,
                                                           batch=True))

    return {
        **{f"embeddings x16: prepare, {m}": embed(m) for m in EMBEDDERS},
        "embeddings x16: answer + JSON": (
            lambda: json_response(translate_embeddings(embedded, as_base64=False)),
            lambda: json_response(translate_gemini_embeddings(embedded, batch=True))),
        "request: decode": (lambda: decode_chat_request_forwarding(chat_body, gateway.forwards_extras),
                            lambda: decode_generate_content(gemini_body)),
        "request: read as chat": (None, lambda: as_chat(decoded, OPENAI_MODEL)),
        f"request: prepare, {OPENAI_MODEL}": prepare(OPENAI_MODEL, OPENAI_MODEL),
        f"request: prepare, {OPEN_MODEL}": prepare(OPEN_MODEL, OPEN_MODEL),
        "request: prepare, to Google (whole)": prepare(OPENAI_MODEL, GOOGLE_ROUTE),
        "answer: translate": (lambda: translate_response(response),
                              lambda: response_from_answer(response, id="0123456789abcdef", model=OPENAI_MODEL)),
        "answer: JSON": (lambda: json_response(completion), lambda: json_response(answer)),
        "chunk: read in place": (lambda: read(chat_stream), lambda: read(gemini_stream)),
        "chunk: render + framing": (lambda: chunk(sse.render(delta)), lambda: chunk(google.render(event))),
        "chunk: read + render + framing": (lambda: chunk(sse.render(read(chat_stream)[0])),
                                           lambda: chunk(google.render(read(gemini_stream)[0]))),
    }


def time_stages(rounds: int, budget: float) -> dict[str, Any]:
    """Each stage's chat and Gemini calls timed back to back (which first alternating by round), the stages in
    a random order each round: medians over rounds, and the median of the rounds' differences."""
    from bench.lib.budget import side_by_side
    from ingress import log

    log.configure("info", open(os.devnull, "w"))  # noqa: SIM115  # the access line's stream, for the process
    return side_by_side(stage_pairs(), APIS, rounds, budget)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    check_translation()
    started, load_before = time.perf_counter(), os.getloadavg()
    stages = time_stages(args.rounds, args.budget)
    return {"meta": {"code": code_version(), "python": sys.version.split()[0], "rounds": args.rounds,
                     "models": list(MODELS), "google_route": GOOGLE_ROUTE,
                     "body_bytes": {"chat": len(chat_request(SIZE, max_tokens=MAX_TOKENS, model=OPENAI_MODEL)),
                                    "gemini": len(gemini_request(OPENAI_MODEL))},
                     "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
                     "seconds": time.perf_counter() - started},
            "stages": stages}


def print_table(result: dict[str, Any]) -> None:
    meta = result["meta"]
    sizes = meta["body_bytes"]
    print(f"\n{describe(meta['code'])}; in process, CPU µs per call (thread time, median of {meta['rounds']} "
          f"rounds; the difference: the median of the rounds' differences, chat and Gemini timed back to back); "
          f"load average {meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} after")
    print(f"the 16 KB, 11-message conversation with a tool: chat {sizes['chat']:,} B, Gemini {sizes['gemini']:,} B; "
          "the mock's answer; one token")
    from bench.lib.budget import print_side_by_side

    print_side_by_side(result["stages"], APIS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~20 s: 3 rounds, shorter loops")
    parser.add_argument("--rounds", type=int, help="rounds of the in-process timings (7; --quick 3)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    niced()
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.budget = 0.02 if args.quick else 0.05
    out = result_path("gemini", args.quick, args.out)
    result = measure(args)
    print_table(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
