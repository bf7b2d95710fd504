"""Clients that send what no HTTP client should: malformed requests, bodies and encodings.

Each is refused in OpenAI's error shape, and nothing the client sent reaches the logs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes.processes import EdgeProcess, free_port

API_KEY = b"sk-secret-0123456789abcdef"
PROMPT = b"PROMPT-MARKER-launch-code-7731"
BODY = b'{"model": "ingress-demo", "messages": [{"role": "user", "content": "' + PROMPT + b'"}]}'


def _head(*lines: bytes, eol: bytes = b"\r\n") -> bytes:
    return eol.join([b"POST /v1/chat/completions HTTP/1.1", b"Host: edge", b"Authorization: Bearer " + API_KEY,
                     *lines, b"", b""])


# Requests aiohttp's parser refuses; each quotes the key or the prompt in the parser's own message.
MALFORMED = [
    pytest.param(_head(b"Content-Length: %d" % len(BODY), eol=b"\n") + BODY, id="bare-lf-line-endings"),
    pytest.param(_head(b"X-Bad\x01: y", b"Content-Length: %d" % len(BODY)) + BODY, id="control-byte-in-a-name"),
    pytest.param(_head(b"X-Key: " + API_KEY + b"\x00", b"Content-Length: %d" % len(BODY)) + BODY,
                 id="nul-in-a-value"),
    pytest.param(_head(b"Authorization : Bearer " + API_KEY, b"Content-Length: %d" % len(BODY)) + BODY,
                 id="space-before-the-colon"),
    pytest.param(_head(b"Transfer-Encoding: chunked") + b"10\r\n" + BODY[:16] + b"\r\nzz" + BODY + b"\r\n0\r\n\r\n",
                 id="bad-chunk-size"),
    pytest.param(_head(b"X-Long: " + API_KEY * 400, b"Content-Length: %d" % len(BODY)) + BODY, id="header-too-long"),
    pytest.param(b"P\x01ST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer " + API_KEY + b"\r\n\r\n",
                 id="bad-method"),
]


async def _exchange(port: int, raw: bytes) -> bytes:
    """Send `raw` on a connection of its own; what came back before the edge closed it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


async def test_malformed_requests_never_put_keys_or_prompts_in_the_logs(tmp_path: Path) -> None:
    config = tmp_path / "quick-drain.toml"
    config.write_text("[drain]\ndelay = 0.1\ndeadline = 2.0\n")
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--config", str(config)], 1, None, stderr_apart=True)
    try:
        await edge.started()
        for param in MALFORMED:
            (raw,) = param.values
            answer = await _exchange(edge.port, raw)  # type: ignore[arg-type]
            assert answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")), (param.id, answer[:200])
        edge.terminate()
        assert await edge.exit_code(timeout=15) == 0
    finally:
        edge.kill()
    out, err = edge.log.read_bytes(), edge.err.read_bytes()
    assert API_KEY[3:] not in out + err
    assert PROMPT not in out + err
    assert err == b"", f"everything is logged on stdout, as JSON lines; stderr held:\n{err.decode()[:2000]}"
    lines = [json.loads(line) for line in out.splitlines()]  # every line is JSON
    refusals = [line for line in lines if "exc_type" in line]
    assert len(refusals) >= len(MALFORMED) - 1, lines  # each is logged (a bad method on a first request at debug)
