"""A real engine through the edge and a bridge: the official `openai` SDK (and `anthropic`'s, on the edge's
Messages API) → the edge → a bridge → llama.cpp's llama-server serving SmolLM2-135M (tests/support/llama_engine.py;
greedy, one slot, prompt cache on).

Both forms a user runs: the sidecar, `ingress bridge openai --target <llama-server>` in its own process
with the edge routing to it over FlatBuffers; and the in-process form, an endpoint's `bridge` in the
edge's config, here with the Anthropic dialect against the same server's `/v1/messages`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import aiohttp
import anthropic
import openai
import pytest
from agent_turn import BETAS, agent_turn
from aiohttp import web
from anthropic.types import MessageParam, TextBlock
from fakes.processes import free_port
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam
from otlp_receiver import OtlpReceiver

from ingress.serve.app import create_app, serve_app
from ingress.settings import Bridge, Endpoint, Group, Route, Settings, Timeouts, Tracing

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
]
ASK: list[MessageParam] = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
ANSWER = "The capital of France is Paris."  # SmolLM2-135M's greedy answer (test_llama_server.py pins it)
PATIENT = Timeouts(connect=5.0, first_byte=60.0, idle=60.0)  # a tiny model on a shared core


@pytest.fixture(scope="module")
def sidecar(llama_server: str) -> Iterator[str]:
    """`ingress bridge openai` in its own process, in front of llama-server; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ingress", "bridge", "openai", "--target", llama_server,
                             "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(_healthy(url, proc))
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def _healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            if proc.poll() is not None:
                raise AssertionError(f"the bridge exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                async with http.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("the bridge did not start")


@pytest.fixture
async def through_sidecar(sidecar: str) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = Settings(upstream=sidecar, timeouts=PATIENT)
    async with serve_app(create_app(settings), "127.0.0.1", 0) as edge, \
            openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-client", max_retries=0, timeout=60) as client:
        yield client


@pytest.fixture
async def through_anthropic(llama_server: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with serve_app(create_app(_in_process(llama_server)), "127.0.0.1", 0) as edge, \
            openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-client", max_retries=0, timeout=60) as client:
        yield client


def _in_process(llama_server: str) -> Settings:
    """An edge whose one endpoint is the Anthropic dialect's bridge, in-process, to llama-server's /v1/messages."""
    bridge = Bridge(dialect="anthropic", target=llama_server, max_tokens=64, timeouts=PATIENT)
    return Settings(groups={"llama": Group(endpoints=[Endpoint(bridge=bridge)])},
                    routes=(Route(glob="*", group="llama"),), timeouts=PATIENT)


@pytest.fixture
async def claude_through_sidecar(sidecar: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The `anthropic` SDK on the edge's Messages API, the edge in front of the sidecar."""
    settings = Settings(upstream=sidecar, timeouts=PATIENT)
    async with serve_app(create_app(settings), "127.0.0.1", 0) as edge, \
            anthropic.AsyncAnthropic(base_url=edge, api_key="sk-client", max_retries=0, timeout=60) as client:
        yield client


@pytest.fixture
async def claude_through_anthropic(llama_server: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The same SDK, the edge in front of the in-process Anthropic dialect."""
    async with serve_app(create_app(_in_process(llama_server)), "127.0.0.1", 0) as edge, \
            anthropic.AsyncAnthropic(base_url=edge, api_key="sk-client", max_retries=0, timeout=60) as client:
        yield client


async def test_an_answer_and_its_usage_through_the_sidecar(through_sidecar: openai.AsyncOpenAI) -> None:
    answer = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION)
    assert answer.choices[0].message.content == ANSWER and answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


async def test_a_stream_with_usage_through_the_sidecar(through_sidecar: openai.AsyncOpenAI) -> None:
    stream = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION, stream=True,
                                                           stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_a_stream_without_usage_shows_none(through_sidecar: openai.AsyncOpenAI) -> None:
    stream = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION, stream=True)
    chunks = [c async for c in stream]
    assert all(c.usage is None for c in chunks)  # the bridge asked for it; the client did not
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER


async def test_max_tokens_cuts_the_answer_with_length(through_sidecar: openai.AsyncOpenAI) -> None:
    answer = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=3)
    assert answer.choices[0].finish_reason == "length" and answer.usage is not None
    assert answer.usage.completion_tokens == 3 and ANSWER.startswith(answer.choices[0].message.content or "")


async def test_a_stop_sequence_ends_the_answer_before_it(through_sidecar: openai.AsyncOpenAI) -> None:
    answer = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION, stop=[" Paris"])
    assert answer.choices[0].message.content == "The capital of France is"
    assert answer.choices[0].finish_reason == "stop"


async def test_a_repeated_prompt_reports_cached_tokens(through_sidecar: openai.AsyncOpenAI) -> None:
    await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION)
    again = await through_sidecar.chat.completions.create(model="smollm2", messages=QUESTION)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens or 0
    assert 0 < cached < again.usage.prompt_tokens  # all but the last prompt token, from the engine's cache


async def test_a_legacy_text_completion_through_the_sidecar(through_sidecar: openai.AsyncOpenAI) -> None:
    answer = await through_sidecar.completions.create(model="smollm2", prompt="The capital of France is",
                                                      max_tokens=4)
    assert answer.choices[0].text and answer.choices[0].finish_reason in ("length", "stop")
    assert answer.usage is not None and answer.usage.completion_tokens <= 4


async def test_the_anthropic_dialect_against_its_messages_api(through_anthropic: openai.AsyncOpenAI) -> None:
    answer = await through_anthropic.chat.completions.create(model="smollm2", messages=QUESTION)
    assert answer.choices[0].message.content == ANSWER and answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    # prompt_tokens = input + cache reads (+ cache writes, which llama-server does not count)
    assert answer.usage.prompt_tokens >= (answer.usage.prompt_tokens_details.cached_tokens or 0)
    stream = await through_anthropic.chat.completions.create(model="smollm2", messages=QUESTION, stream=True,
                                                             stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_the_anthropic_dialect_cut_by_max_tokens(through_anthropic: openai.AsyncOpenAI) -> None:
    answer = await through_anthropic.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=3)
    assert answer.choices[0].finish_reason == "length"


# --- Anthropic's Messages API at the edge, the `anthropic` SDK as the client -------------------------


def _text(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


async def test_a_messages_answer_through_the_sidecar(claude_through_sidecar: anthropic.AsyncAnthropic) -> None:
    message = await claude_through_sidecar.messages.create(model="smollm2", max_tokens=64, messages=ASK,
                                                           extra_headers={"x-request-id": "llama-msg-0001"})
    assert (message.id, message.model) == ("msg_llama-msg-0001", "smollm2")
    assert _text(message) == ANSWER and len(message.content) == 1
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    usage = message.usage
    assert usage.output_tokens > 0 and usage.input_tokens + (usage.cache_read_input_tokens or 0) > 0


async def test_a_messages_stream_through_the_sidecar(claude_through_sidecar: anthropic.AsyncAnthropic) -> None:
    async with claude_through_sidecar.messages.stream(model="smollm2", max_tokens=64, messages=ASK) as stream:
        text = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(text) == ANSWER and len(text) > 1  # token by token
    assert _text(final) == ANSWER and final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


async def test_max_tokens_is_the_messages_stop_reason(claude_through_sidecar: anthropic.AsyncAnthropic) -> None:
    message = await claude_through_sidecar.messages.create(model="smollm2", max_tokens=3, messages=ASK)
    assert (message.stop_reason, message.stop_sequence, message.usage.output_tokens) == ("max_tokens", None, 3)
    assert ANSWER.startswith(_text(message)) and _text(message)


async def test_a_stop_sequence_through_the_sidecar_ends_the_answer(
        claude_through_sidecar: anthropic.AsyncAnthropic) -> None:
    """llama-server's OpenAI API ends the answer at the stop sequence but says only `finish_reason: "stop"`,
    not which sequence matched (nor that one did): the edge cannot tell it from the end of the turn, and
    says `end_turn` with no `stop_sequence`, as it must not make one up."""
    message = await claude_through_sidecar.messages.create(model="smollm2", max_tokens=64, messages=ASK,
                                                           stop_sequences=[" Paris", " Lyon"])
    assert _text(message) == "The capital of France is"
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


async def test_a_stop_sequence_the_engine_names_is_the_messages_stop_reason(
        claude_through_anthropic: anthropic.AsyncAnthropic) -> None:
    """llama-server's own Messages API names the sequence that matched (`stop_sequence`, though its
    `stop_reason` says end_turn): through the Anthropic dialect the edge answers `stop_sequence` with it,
    whole and streamed."""
    message = await claude_through_anthropic.messages.create(model="smollm2", max_tokens=64, messages=ASK,
                                                             stop_sequences=[" Lyon", " Paris"])
    assert _text(message) == "The capital of France is"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", " Paris")
    async with claude_through_anthropic.messages.stream(model="smollm2", max_tokens=64, messages=ASK,
                                                        stop_sequences=[" Lyon", " Paris"]) as stream:
        final = await stream.get_final_message()
    assert _text(final) == "The capital of France is"
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", " Paris")


@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")  # the SDK's own
async def test_googles_sdk_through_the_sidecar(sidecar: str) -> None:
    """The `google-genai` SDK on the edge's Gemini API, by base URL alone, the edge in front of the sidecar:
    the same greedy answer whole and streamed, Google's finish reason and usage, and a maxOutputTokens cut."""
    async with serve_app(create_app(Settings(upstream=sidecar, timeouts=PATIENT)), "127.0.0.1", 0) as edge:
        client = genai.Client(api_key="gk-client", http_options=genai_types.HttpOptions(base_url=edge, timeout=60_000))
        question = QUESTION[0]["content"]
        answer = await client.aio.models.generate_content(model="smollm2", contents=question)
        chunks = [c async for c in await client.aio.models.generate_content_stream(model="smollm2", contents=question)]
        cut = await client.aio.models.generate_content(
            model="smollm2", contents=question, config=genai_types.GenerateContentConfig(max_output_tokens=3))
        await client.aio.aclose()

    assert answer.text == ANSWER and answer.candidates and answer.candidates[0].finish_reason == "STOP"
    usage = answer.usage_metadata
    assert usage is not None and (usage.candidates_token_count or 0) > 0 and (usage.prompt_token_count or 0) > 0
    assert "".join(c.text or "" for c in chunks) == ANSWER and len(chunks) > 2  # token by token
    assert chunks[-1].usage_metadata is not None and chunks[-1].candidates
    assert chunks[-1].candidates[0].finish_reason == "STOP"
    assert cut.candidates and cut.candidates[0].finish_reason == "MAX_TOKENS" and ANSWER.startswith(cut.text or "")


async def test_one_trace_from_the_edge_through_the_sidecar_to_the_engine(llama_server: str) -> None:
    """The edge → `ingress bridge openai` (its own process) → llama-server: the bridge's span is the child
    of the edge's attempt, read from the passport, and the engine's request carries the bridge span's
    context (seen by a recording hop in front of llama-server)."""
    receiver, engine_headers = OtlpReceiver(), []

    async def hop(request: web.Request) -> web.Response:  # records the engine request's headers, forwards it
        engine_headers.append(dict(request.headers))
        async with aiohttp.ClientSession() as http, http.post(
                f"{llama_server}{request.path}", data=await request.read(),
                headers={"Content-Type": request.content_type}) as answer:
            return web.Response(status=answer.status, body=await answer.read(), content_type=answer.content_type)

    recording = web.Application()
    recording.router.add_post("/v1/chat/completions", hop)
    async with receiver.running() as traces, serve_app(recording, "127.0.0.1", 0) as engine:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "ingress", "bridge", "openai", "--target", engine,
                                 "--port", str(port), "--log-level", "warning", "--trace-endpoint", traces],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            await _healthy(f"http://127.0.0.1:{port}", proc)
            settings = Settings(upstream=f"http://127.0.0.1:{port}", timeouts=PATIENT,
                                tracing=Tracing(endpoint=traces, flush_interval=0.05))
            async with serve_app(create_app(settings), "127.0.0.1", 0) as edge, openai.AsyncOpenAI(
                    base_url=f"{edge}/v1", api_key="sk-client", max_retries=0, timeout=60) as client:
                answer = await client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=24)
                assert answer.choices[0].message.content == ANSWER
            spans = await receiver.wait_for(  # the edge's server span ends last of the edge's
                lambda spans: {"server", "ingress-bridge"} <= {s.kind for s in spans} | {s.service for s in spans},
                "the edge's and the bridge's spans", timeout=30)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            if proc.stderr is not None:
                proc.stderr.close()
    [server] = [s for s in spans if s.kind == "server"]
    [attempt] = [s for s in spans if s.name == "attempt"]
    [bridged] = [s for s in spans if s.service == "ingress-bridge"]
    assert attempt.parent_id == server.span_id and bridged.parent_id == attempt.span_id
    assert {s.trace_id for s in spans} == {server.trace_id}
    assert (bridged.name, bridged.attributes["http.response.status_code"]) == ("chat smollm2", 200)
    [headers] = engine_headers
    assert headers["traceparent"].startswith(f"00-{server.trace_id}-{bridged.span_id}-")


async def test_an_agentic_clis_first_turn_is_answered_by_the_engine(
        claude_through_sidecar: anthropic.AsyncAnthropic) -> None:
    """The whole first turn of an agent CLI (a dozen tools with long schemas, system blocks with cache_control,
    adaptive thinking, context_management, effort, eight beta flags, `?beta=true`), streamed, reaches
    llama-server through the edge and the OpenAI dialect's bridge, and its answer comes back in Anthropic's
    event grammar: what only Anthropic would use is left out (named in the access line), the rest maps."""
    async with claude_through_sidecar.beta.messages.stream(**agent_turn(max_tokens=24), betas=BETAS,
                                                           extra_query={"beta": "true"}) as stream:
        events = [e.type async for e in stream]
        final = await stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert events.count("message_start") == events.count("message_delta") == events.count("message_stop") == 1
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use") and final.content
    # The engine read the system blocks and every turn (~190 tokens; SmolLM2's chat template renders no tools,
    # which llama-server then leaves out of the prompt), not the bare question (~30).
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 100
