"""Real coding agents complete a real tool loop through a real edge, configured by its base URL alone.

Each agent (tests/support/agent_clis.py: Claude Code, opencode, Codex and Gemini CLI, pinned, installed from npm
into the cache)
runs non-interactively as a subprocess, in a temporary directory, with a home of its own. Its model is a
route of an in-process edge whose endpoint is a bridge the edge runs, in front of a scripted model
(tests/support/fakes/scripted.py): `bridge openai` to its chat completions, or `bridge anthropic` to its Messages
API. The script answers the agent's first request with one call to the agent's own shell tool, which
writes proof.txt; the agent runs it and sends its result back; the script answers "DONE: <the result>".

Each test asserts that the file exists with the script's text, that the agent's final output is the
script's final answer, that the edge answered every request 200, and that the tool's result reached the
scripted model. Marked `agents`: `-m "not agents"` leaves them (and the installs) out, but not the test
of the scripted model itself, which the official SDKs read in both dialects. docs/agents.md tells each
agent's configuration and what it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from agent_clis import (
    CLAUDE_CODE,
    CODEX,
    CODEX_QUIET,
    GEMINI_CLI,
    GEMINI_QUIET,
    OPENCODE,
    Agent,
    installed_agent,
    isolated_env,
)
from aiohttp import web
from fakes.scripted import ASIDE, DONE, REASONING_BLOB, ScriptedModel, last_line
from llama_engine import ensure_model, ensure_server, running_server

from ingress.edge.appkeys import EXCHANGE
from ingress.exchange import Exchange
from ingress.oai.responses_to_chat import COMPACT, COMPACTED
from ingress.serve.app import create_app, serve_app
from ingress.settings import Bridge, Endpoint, Group, Route, Settings, Timeouts

MODEL = "scripted-coder"  # the one name every agent is told to use, for its main and its small model
CLIENT_KEY = "sk-ingress-agent-test"  # the agent's key to the edge (the edge is open: any key passes)
RUN_TIMEOUT = 180.0  # one agent's whole run (seconds here; Codex may retry a WebSocket for ~12 s first)
GENEROUS = Timeouts(connect=5.0, first_byte=30.0, idle=30.0)
PROMPT = "Create the file proof.txt with your shell tool, then tell me what it says."


@dataclass(frozen=True)
class Answered:
    """One response the edge started: what was asked, its status, and the edge's record of it."""

    method: str
    path: str
    status: int
    upgrade: bool  # a WebSocket upgrade (Codex's first try), which the edge does not speak
    exchange: Exchange | None


@dataclass
class Stack:
    """An edge on loopback whose route MODEL is a bridge (`dialect`) in front of a scripted model."""

    url: str
    dialect: str
    model: ScriptedModel
    answered: list[Answered] = field(default_factory=list)


@contextlib.asynccontextmanager
async def edge_in_front_of_scripted(dialect: str, command: str, monkeypatch: pytest.MonkeyPatch,
                                    model: ScriptedModel | None = None, *, any_model: bool = False,
                                    responses_whole: bool = False, engine_extras: bool = False) -> AsyncIterator[Stack]:
    monkeypatch.setenv("SCRIPTED_MODEL_KEY", "sk-scripted-engine")  # the bridge's key to the "engine"
    model = model or ScriptedModel(command)
    async with model.running() as engine:
        bridge = Bridge(dialect="openai" if dialect == "openai" else "anthropic",
                        target=f"{engine}/v1" if dialect == "openai" else engine,
                        api_key_env="SCRIPTED_MODEL_KEY", timeouts=GENEROUS)
        # A route to Anthropic (provider = "anthropic") sends a Messages request on whole, as it came.
        route = Route(model=None if any_model else MODEL, glob="*" if any_model else None, group="scripted",
                      provider="anthropic" if dialect == "anthropic" else "openai",
                      responses="whole" if responses_whole else "as_chat",
                      extra_fields="forward" if engine_extras else "refuse")
        settings = Settings(groups={"scripted": Group(endpoints=[Endpoint(bridge=bridge)])}, routes=(route,),
                            timeouts=GENEROUS)
        app = create_app(settings)
        answered: list[Answered] = []

        async def record(request: web.Request, response: web.StreamResponse) -> None:
            upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
            answered.append(Answered(request.method, request.path, response.status, upgrade, request.get(EXCHANGE)))

        app.on_response_prepare.append(record)
        async with serve_app(app, "127.0.0.1", 0) as url:
            yield Stack(url, dialect, model, answered)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


async def run_agent(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """The agent as a subprocess in its own session, no standard input, killed (its group) past RUN_TIMEOUT."""
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                start_new_session=True)
    try:
        async with asyncio.timeout(RUN_TIMEOUT):
            out, err = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = await proc.communicate()
        raise AssertionError(f"{argv[0]} still running after {RUN_TIMEOUT:.0f} s\nstdout: {out.decode()[-3000:]}\n"
                             f"stderr: {err.decode()[-3000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever it started and left behind
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


# --- each agent's exact configuration (docs/agents.md shows the same) ------------------------------


def claude_code(exe: Path, edge: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """Claude Code speaks Messages to ANTHROPIC_BASE_URL; ANTHROPIC_MODEL and the small model pinned to
    the route's name; Bash allowed by --allowedTools (no permission prompt, and no root-refused
    --dangerously-skip-permissions)."""
    env = isolated_env(CLAUDE_CODE, home, ANTHROPIC_BASE_URL=edge, ANTHROPIC_API_KEY=CLIENT_KEY,
                       ANTHROPIC_MODEL=MODEL, ANTHROPIC_SMALL_FAST_MODEL=MODEL,
                       ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL, CLAUDE_CONFIG_DIR=str(home / ".claude"))
    return [str(exe), "-p", PROMPT, "--allowedTools", "Bash", "--max-turns", "4", "--output-format", "text"], env


def opencode(exe: Path, edge: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """opencode speaks chat completions through an OpenAI-compatible provider of its config, whose
    baseURL is the edge's /v1; bash allowed by the config's permission."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"ingress": {"npm": "@ai-sdk/openai-compatible", "name": "ingress",
                                 "options": {"baseURL": f"{edge}/v1", "apiKey": CLIENT_KEY},
                                 "models": {MODEL: {"name": MODEL, "tool_call": True}}}},
        "model": f"ingress/{MODEL}",
        "small_model": f"ingress/{MODEL}",
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }
    path = home / "opencode.json"
    path.write_text(json.dumps(config, indent=2))
    env = isolated_env(OPENCODE, home, OPENCODE_CONFIG=str(path))
    return [str(exe), "run", "--model", f"ingress/{MODEL}", PROMPT], env


def codex(exe: Path, edge: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """Codex speaks the Responses API to openai_base_url (a WebSocket first, then HTTP); CODEX_HOME a
    directory of its own; no sandbox or approvals (the test's directory is its sandbox)."""
    (home / "codex").mkdir()
    env = isolated_env(CODEX, home, CODEX_HOME=str(home / "codex"), CODEX_API_KEY=CLIENT_KEY)
    quiet = [arg for setting in CODEX_QUIET for arg in ("-c", setting)]
    return [str(exe), "exec", "-m", MODEL, "-c", f'openai_base_url="{edge}/v1"', *quiet,
            "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", PROMPT], env


def gemini_cli(exe: Path, edge: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """Gemini CLI speaks Google's Gemini API (`streamGenerateContent?alt=sse`, `x-goog-api-key`) to
    GOOGLE_GEMINI_BASE_URL with GEMINI_API_KEY, its API-key auth selected in its settings; the route's name
    by `-m`; every tool allowed (`--yolo`) in a directory trusted for the run (`--skip-trust`)."""
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, **GEMINI_QUIET}
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = isolated_env(GEMINI_CLI, home, GOOGLE_GEMINI_BASE_URL=edge, GEMINI_API_KEY=CLIENT_KEY)
    return [str(exe), "-m", MODEL, "--yolo", "--skip-trust", "--output-format", "text", "-p", PROMPT], env


@dataclass(frozen=True)
class Case:
    agent: Agent
    configure: Callable[[Path, str, Path], tuple[list[str], dict[str, str]]]
    dialect: str  # the bridge in front of the scripted model: "openai" or "anthropic"
    api: str  # what the agent asks the edge for (Exchange.api)
    shell: str  # the agent's shell tool, as it offers it
    engine_extras: bool = False  # the route forwards engine extras (Gemini CLI's topK)


CASES = [
    pytest.param(Case(CLAUDE_CODE, claude_code, "openai", "messages", "Bash"), id="claude-code-openai"),
    pytest.param(Case(CLAUDE_CODE, claude_code, "anthropic", "messages", "Bash"), id="claude-code-anthropic"),
    pytest.param(Case(OPENCODE, opencode, "openai", "chat", "bash"), id="opencode-openai"),
    pytest.param(Case(OPENCODE, opencode, "anthropic", "chat", "bash"), id="opencode-anthropic"),
    pytest.param(Case(CODEX, codex, "openai", "responses", "exec_command"), id="codex-openai"),
    pytest.param(Case(CODEX, codex, "anthropic", "responses", "exec_command"), id="codex-anthropic"),
    pytest.param(Case(GEMINI_CLI, gemini_cli, "openai", "gemini", "run_shell_command", engine_extras=True),
                 id="gemini-cli-openai"),
    pytest.param(Case(GEMINI_CLI, gemini_cli, "anthropic", "gemini", "run_shell_command"),
                 id="gemini-cli-anthropic"),
]


@pytest.mark.agents
@pytest.mark.timeout(900)  # a first run installs the agent (agent_clis.INSTALL_TIMEOUT), then runs it
@pytest.mark.parametrize("case", CASES)
async def test_an_agent_runs_its_shell_tool_and_answers_with_the_result(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = installed_agent(case.agent)
    proof = f"hello from {case.agent.name}"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    async with edge_in_front_of_scripted(case.dialect, f"printf '{proof}' > proof.txt && cat proof.txt",
                                         monkeypatch, engine_extras=case.engine_extras) as stack:
        argv, env = case.configure(exe, stack.url, home)
        run = await run_agent(argv, work, env)
    said = f"exit {run.code}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-3000:]}\nedge: {_statuses(stack)}"

    # The edge answered everything 200 (but the WebSocket upgrades Codex tries first, and then gives up
    # on), and the agent's model requests were its API, to the route.
    model_calls = [a for a in stack.answered if a.exchange is not None and a.exchange.api == case.api
                   and not a.upgrade]
    assert model_calls, said
    assert [a for a in stack.answered if a.status != 200 and not a.upgrade] == [], said
    assert {a.exchange.routed.model for a in model_calls if a.exchange is not None} == {MODEL}, said
    # The script called the shell tool once; it ran in the agent's directory; its result went back.
    assert [reply.tool for reply in stack.model.replies if reply.tool] == [case.shell], said
    assert (work / "proof.txt").read_text() == proof, said
    assert [last_line(result) for result in stack.model.tool_results()] == [proof], said
    # The agent's last word is the script's last answer.
    assert run.code == 0, said
    assert f"{DONE}{proof}" in run.stdout, said
    if case.agent is GEMINI_CLI:
        # Its model turn comes back with a thought signature (its placeholder for a call that had none): only
        # Gemini reads one, and the edge names it as not sent.
        # Its topK 64 is carried where the route forwards engine extras, else named as not sent.
        top_k = [] if case.engine_extras else ["generation_config.top_k"]
        hints = [a.exchange.routed.hints for a in model_calls if a.exchange is not None]
        assert hints == [top_k, ["thought_signature", *top_k]], said
    if case.dialect == "anthropic":
        # Anthropic caches only up to a breakpoint: Claude Code places its own; for the others the edge
        # does, and the turn with the tool's result reads the turn before it from the cache.
        assert any("cache_control" in json.dumps(r.body) for r in stack.model.received), said
        last = [a.exchange for a in model_calls if a.exchange is not None and a.exchange.answer.usage is not None][-1]
        assert last.answer.usage is not None and last.answer.usage.cached_tokens > 0, said


def _statuses(stack: Stack) -> list[tuple[str, str, int, Any]]:
    return [(a.method, a.path, a.status, a.exchange.failure if a.exchange is not None else None)
            for a in stack.answered]


# --- the scripted model itself, read by the official SDKs (no agent needed) ------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_the_scripted_model_plays_its_loop_in_both_dialects(streamed: bool) -> None:
    """What the agents rely on: a call to the shell tool, then DONE with the result's last line, with
    usage, whole and streamed, as the `openai` and `anthropic` SDKs read them."""
    model = ScriptedModel("printf hi > proof.txt && cat proof.txt")
    bash: Any = {"type": "object", "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                 "required": ["command", "description"]}
    async with model.running() as url, \
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as chat, \
            anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as messages:
        ask: Any = [{"role": "user", "content": "go"}]
        tools: Any = [{"type": "function", "function": {"name": "bash", "parameters": bash}}]
        if streamed:
            stream = await chat.chat.completions.create(model=MODEL, messages=ask, tools=tools, stream=True,
                                                        stream_options={"include_usage": True})
            chunks = [chunk async for chunk in stream]
            calls = [c for chunk in chunks for choice in chunk.choices for c in choice.delta.tool_calls or ()]
            arguments = "".join(c.function.arguments or "" for c in calls if c.function is not None)
            call_id, usage = calls[0].id, chunks[-1].usage
        else:
            answer = await chat.chat.completions.create(model=MODEL, messages=ask, tools=tools)
            [call] = answer.choices[0].message.tool_calls or []
            assert call.type == "function"
            arguments, call_id, usage = call.function.arguments, call.id, answer.usage
        assert json.loads(arguments) == {"command": "printf hi > proof.txt && cat proof.txt",
                                         "description": "Writes the proof file"}
        assert usage is not None and usage.total_tokens > 0
        back: Any = [*ask, {"role": "assistant", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "Output:\nhi\n"}]
        done = await chat.chat.completions.create(model=MODEL, messages=back, tools=tools)
        assert done.choices[0].message.content == f"{DONE}hi"

        shell: Any = [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                                                        "required": ["command"]}}]
        turn: Any = [{"role": "user", "content": "go"}]
        message: anthropic.types.Message
        if streamed:
            async with messages.messages.stream(model=MODEL, max_tokens=64, messages=turn, tools=shell) as events:
                message = await events.get_final_message()
        else:
            message = await messages.messages.create(model=MODEL, max_tokens=64, messages=turn, tools=shell)
        [use] = message.content
        assert use.type == "tool_use" and use.input == {"command": "printf hi > proof.txt && cat proof.txt"}
        assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0
        turn += [{"role": "assistant", "content": [use.model_dump()]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hi"}]}]
        final = await messages.messages.create(model=MODEL, max_tokens=64, messages=turn, tools=shell)
        assert [(b.type, getattr(b, "text", None)) for b in final.content] == [("text", f"{DONE}hi")]
    assert model.tool_results() == ["Output:\nhi\n", "hi"]


# --- Codex compacts its context through the edge ----------------------------------------------------


@pytest.mark.agents
@pytest.mark.timeout(900)
async def test_codex_compacts_its_context_through_the_edge_and_goes_on(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted model's first answer (the shell call) reports a prompt of 50,000 tokens, past the
    2,000 Codex is told to compact at: Codex asks the edge to compact (its last item a compaction_trigger)
    before it sends the tool's result. The edge asks the model for a summary, answers one compaction item
    holding it sealed, and reads it back as the summary when Codex sends it with the tool's result."""
    exe = installed_agent(CODEX)
    proof = "hello from codex"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    model = ScriptedModel(f"printf '{proof}' > proof.txt && cat proof.txt",
                          prompt_tokens=lambda n, body: 50_000 if n == 0 else 100)
    async with edge_in_front_of_scripted("openai", model.command, monkeypatch, model) as stack:
        argv, env = codex(exe, stack.url, home)
        run = await run_agent([*argv[:-1], "-c", "model_auto_compact_token_limit=2000", argv[-1]], work, env)
    said = f"exit {run.code}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-3000:]}\nedge: {_statuses(stack)}"
    assert [a for a in stack.answered if a.status != 200 and not a.upgrade] == [], said
    asked = [r.body for r in model.received if _last_user_text(r.body) == COMPACT]
    assert len(asked) == 1 and "tools" not in asked[0], said  # the summary, asked without the tools
    later = model.received[model.received.index(next(r for r in model.received if r.body is asked[0])) + 1:]
    assert any(_has_user_text(r.body, COMPACTED + ASIDE) for r in later), said  # the sealed summary, read back
    assert (work / "proof.txt").read_text() == proof, said
    assert run.code == 0 and f"{DONE}{proof}" in run.stdout, said


@pytest.mark.agents
@pytest.mark.timeout(900)
async def test_codex_with_its_default_model_is_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `-m`: Codex asks for its own default model, whose requests take another shape (its tools in an
    `additional_tools` input item, namespaces holding a freeform `exec` tool with a Lark grammar, a
    `configuration_update` item): served by a route for any model name, answered in one turn (the script
    finds no shell tool among them and answers in text)."""
    exe = installed_agent(CODEX)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    async with edge_in_front_of_scripted("openai", "true", monkeypatch, any_model=True) as stack:
        argv, env = codex(exe, stack.url, home)
        m = argv.index("-m")
        run = await run_agent([*argv[:m], *argv[m + 2:]], work, env)
    said = f"exit {run.code}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-3000:]}\nedge: {_statuses(stack)}"
    assert [a for a in stack.answered if a.status != 200 and not a.upgrade] == [], said
    [asked] = stack.model.received
    names = [t["function"]["name"] for t in asked.body["tools"] if t["type"] == "function"]
    assert "collaboration__spawn_agent" in names and asked.body["reasoning_effort"], said
    assert run.code == 0 and ASIDE in run.stdout, said


@pytest.mark.agents
@pytest.mark.timeout(900)
async def test_codex_on_a_route_to_openai_itself_goes_whole_and_gets_openais_reasoning_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A route with `responses = "whole"` (OpenAI's own API): Codex's request goes on to /v1/responses as it
    sent it (client_metadata, its namespace tool, web_search), the answer's reasoning item carries OpenAI's
    own encrypted_content, and on the next turn that blob reaches OpenAI again untouched."""
    exe = installed_agent(CODEX)
    proof = "hello from codex"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    async with edge_in_front_of_scripted("openai", f"printf '{proof}' > proof.txt && cat proof.txt", monkeypatch,
                                         responses_whole=True) as stack:
        argv, env = codex(exe, stack.url, home)
        run = await run_agent(argv, work, env)
    said = f"exit {run.code}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-3000:]}\nedge: {_statuses(stack)}"
    assert [a for a in stack.answered if a.status != 200 and not a.upgrade] == [], said
    first, second = (r.body for r in stack.model.received)
    assert [r.path for r in stack.model.received] == ["/v1/responses"] * 2, said
    assert first["client_metadata"] and first["model"] == MODEL, said
    assert {t["type"] for t in first["tools"]} >= {"function", "namespace", "web_search"}, said
    sent_back = [i for i in second["input"] if i.get("type") == "reasoning"]
    assert [i["encrypted_content"] for i in sent_back] == [f"{REASONING_BLOB}0"], said
    served = [a.exchange for a in stack.answered if a.exchange is not None and a.exchange.api == "responses"
              and not a.upgrade]
    assert all(not exchange.routed.hints for exchange in served), said  # nothing left out: it all went on
    assert (work / "proof.txt").read_text() == proof, said
    assert run.code == 0 and f"{DONE}{proof}" in run.stdout, said


def _last_user_text(body: dict[str, Any]) -> str | None:
    users = [m for m in body.get("messages") or () if m.get("role") == "user"]
    return _content_text(users[-1].get("content")) if users else None


def _has_user_text(body: dict[str, Any], text: str) -> bool:
    return any(m.get("role") == "user" and _content_text(m.get("content")) == text for m in body.get("messages") or ())


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


# --- Codex's first turn, served by a real engine -----------------------------------------------------


@pytest.fixture
def long_llama(llama_server: str, tmp_path: Path) -> Iterator[str]:
    """A second llama-server (the session's has a 2,048-token context) whose context takes Codex's first
    request whole: ~4,600 of SmolLM2's tokens of instructions and tool schemas (~40 s to read on one
    thread). It needs the session's build, which the `llama_server` fixture asks for."""
    with running_server(ensure_server(), ensure_model(), tmp_path / "llama-long.log", "-c", "8192") as url:
        yield url


@pytest.mark.agents
@pytest.mark.llama
@pytest.mark.timeout(900)
async def test_codex_first_turn_is_served_by_a_real_engine(long_llama: str, tmp_path: Path) -> None:
    """Codex, its defaults untouched, through the edge and `bridge openai` to llama.cpp's llama-server:
    its whole first request (developer messages, 13 tools flat, its web_search left out) is taken by the
    engine, whose answer ends Codex's turn. SmolLM2-135M calls no tool: the turn is one answer."""
    exe = installed_agent(CODEX)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    bridge = Bridge(dialect="openai", target=f"{long_llama}/v1", timeouts=Timeouts(connect=5.0, first_byte=600.0,
                                                                                     idle=60.0))
    settings = Settings(groups={"llama": Group(endpoints=[Endpoint(bridge=bridge)])},
                        routes=(Route(model=MODEL, group="llama", provider="self_hosted", upstream_model="smollm2"),),
                        timeouts=Timeouts(connect=5.0, first_byte=600.0, idle=60.0))
    app = create_app(settings)
    answered: list[tuple[str, int, Exchange | None]] = []

    async def record(request: web.Request, response: web.StreamResponse) -> None:
        answered.append((request.method, response.status, request.get(EXCHANGE)))

    app.on_response_prepare.append(record)
    async with serve_app(app, "127.0.0.1", 0) as url:
        argv, env = codex(exe, url, home)
        run = await run_agent([*argv[:-1], "Say hello."], work, env)
    said = f"exit {run.code}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-3000:]}\nedge: {answered}"
    posts = [(status, exchange) for method, status, exchange in answered if method == "POST"]
    assert posts and all(status == 200 for status, _ in posts), said
    served = [exchange for _, exchange in posts if exchange is not None]
    assert served and all(exchange.answer.served_model == "smollm2" and exchange.answer.usage is not None
                          for exchange in served), said
    assert served[0].answer.usage is not None and served[0].answer.usage.prompt_tokens > 4000, said  # the whole request
    assert served[0].routed.hints == ["client_metadata", "input.internal_chat_message_metadata_passthrough",
                                 "tools.web_search"], said
    assert run.code == 0, said
