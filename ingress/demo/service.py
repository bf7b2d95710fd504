"""The demo internal service over HTTP: takes a CompletionRequest or an EmbeddingRequest, answers in FlatBuffers."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from ingress import wire
from ingress.demo import embed as embedding
from ingress.demo.answer import Plan, logprob, plan
from ingress.demo.cache import KvCache, KvCacheSettings, Prefill
from ingress.demo.text import TextPlan, plan_text, usage_of
from ingress.sockets import name_server

DELAY = web.AppKey("delay", float)
KV_CACHE = web.AppKey("kv_cache", KvCache)  # a simulated prefix cache (ingress/demo/cache.py); off by default
FINGERPRINT = "fp_ingress_demo"  # the demo's one configuration
TIER = "default"  # the demo's one tier: the answer to a request that names any


def text_usage(prompt: int, completion: int, cached: int = 0) -> wire.Usage:
    """Every token the demo counts is text (an image or audio part is not counted at all); `cached` of the
    prompt's were read from its simulated prefix cache (0 with the cache off). It writes no cache a client
    pays for: cache-write tokens stay 0."""
    return wire.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                      prompt_text_tokens=prompt, completion_text_tokens=completion, cached_tokens=cached)


def _usage(p: Plan, n: int, prefill: Prefill) -> wire.Usage:
    return text_usage(p.prompt_tokens, p.completion_tokens * n, prefill.cached_tokens)


def _calls(p: Plan) -> list[wire.FunctionCall]:
    call = p.tool_call
    return [wire.FunctionCall(id=call.id, name=call.name, arguments=call.arguments)] if call else []


async def complete(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    try:
        wire.verify_request(body)
        req = wire.read_request_data(body)
        request_id, model = req.request_id or "", req.model_name or ""
        p = plan(req, request_id)
    except Exception as exc:  # a buffer we cannot read is the caller's fault
        error = wire.ErrorInfo(status=400, type="invalid_request_error", code="bad_buffer",
                               message=f"Unreadable request: {exc}")
        return web.Response(status=400, body=wire.write_error(error), content_type=wire.CONTENT_TYPE)
    n = req.n or 1
    if req.text_completion:
        plans = plan_text(req)
        prefill = request.app[KV_CACHE].prefill(req, usage_of(plans, n)[0])
        return await _complete_text(request, req, n, plans, prefill)
    prefill = request.app[KV_CACHE].prefill(req, p.prompt_tokens)
    answer_id, created = f"chatcmpl-{request_id}", int(time.time())
    top = req.top_logprobs or 0
    logprobs = [logprob(t, top) for t in p.text_tokens] if req.logprobs else None
    tier = TIER if req.service_tier is not None else None
    if not req.stream:
        if prefill.delay_s:
            await asyncio.sleep(prefill.delay_s)
        text = "".join(p.text_tokens) if not p.tool_call else None
        choices = [wire.Choice(index=i, content=text, tool_calls=_calls(p), finish_reason=p.finish_reason,
                               logprobs=logprobs) for i in range(n)]
        response = wire.Response(id=answer_id, model=model, created=created, choices=choices,
                                 usage=_usage(p, n, prefill), system_fingerprint=FINGERPRINT, service_tier=tier)
        return web.Response(body=wire.write_response(response), content_type=wire.CONTENT_TYPE)

    stream = web.StreamResponse(headers={"Content-Type": wire.STREAM_CONTENT_TYPE})
    await stream.prepare(request)
    delay, seq = request.app[DELAY], 0
    if prefill.delay_s:  # the first token waits for the prompt's prefill
        await asyncio.sleep(prefill.delay_s)

    async def send(**fields: object) -> None:
        nonlocal seq
        await stream.write(wire.write_chunk(wire.Chunk(sequence=seq, **fields)))  # type: ignore[arg-type]  # fields mirror Chunk
        seq += 1

    for i in range(n):
        await send(choice_index=i, id=answer_id, model=model, created=created, role="assistant", content="",
                   system_fingerprint=FINGERPRINT, service_tier=tier)
    for j, token in enumerate(p.text_tokens):
        if delay:
            await asyncio.sleep(delay)
        for i in range(n):
            await send(choice_index=i, content=token, logprobs=None if logprobs is None else [logprobs[j]])
    if p.tool_call:
        call = p.tool_call
        for i in range(n):
            head = wire.ToolCallDelta(index=0, id=call.id, type="function", name=call.name, arguments="")
            await send(choice_index=i, tool_calls=[head])
            await send(choice_index=i, tool_calls=[wire.ToolCallDelta(index=0, arguments=call.arguments)])
    for i in range(n):
        await send(choice_index=i, finish_reason=p.finish_reason)
    await send(usage=_usage(p, n, prefill), done=True)
    await stream.write_eof()
    return stream


async def _complete_text(request: web.Request, req: wire.CompletionRequestData, n: int,
                         plans: list[TextPlan], prefill: Prefill) -> web.StreamResponse:
    """A legacy text completion: each prompt's n choices, indexed prompt * n + j."""
    usage = text_usage(*usage_of(plans, n), prefill.cached_tokens)
    answer_id, model, created = f"cmpl-{req.request_id or ''}", req.model_name or "", int(time.time())
    if prefill.delay_s:
        await asyncio.sleep(prefill.delay_s)
    if not req.stream:
        choices = [wire.Choice(index=i * n + j, content=p.echo + "".join(p.words), finish_reason=p.finish_reason,
                               logprobs=p.logprobs)
                   for i, p in enumerate(plans) for j in range(n)]
        response = wire.Response(id=answer_id, model=model, created=created, choices=choices, usage=usage)
        return web.Response(body=wire.write_response(response), content_type=wire.CONTENT_TYPE)
    stream = web.StreamResponse(headers={"Content-Type": wire.STREAM_CONTENT_TYPE})
    await stream.prepare(request)
    delay = request.app[DELAY]
    chunks = [wire.Chunk(sequence=0, id=answer_id, model=model, created=created)]
    chunks += [wire.Chunk(sequence=0, choice_index=i * n + j, content=p.echo)
               for i, p in enumerate(plans) for j in range(n) if p.echo]
    await stream.write(b"".join(wire.write_chunk(c) for c in _numbered(chunks)))
    seq = len(chunks)
    for i, p in enumerate(plans):
        for k, word in enumerate(p.words):
            if delay:
                await asyncio.sleep(delay)
            logprobs = None if p.logprobs is None else [p.logprobs[k]]
            frames = [wire.Chunk(sequence=0, choice_index=i * n + j, content=word, logprobs=logprobs)
                      for j in range(n)]
            await stream.write(b"".join(wire.write_chunk(c) for c in _numbered(frames, seq)))
            seq += n
    last = [wire.Chunk(sequence=0, choice_index=i * n + j, finish_reason=p.finish_reason)
            for i, p in enumerate(plans) for j in range(n)]
    last.append(wire.Chunk(sequence=0, usage=usage, done=True))
    await stream.write(b"".join(wire.write_chunk(c) for c in _numbered(last, seq)))
    await stream.write_eof()
    return stream


def _numbered(chunks: list[wire.Chunk], start: int = 0) -> list[wire.Chunk]:
    for k, chunk in enumerate(chunks):
        chunk.sequence = start + k
    return chunks


def _error(status: int, message: str, code: str, param: str | None = None) -> web.Response:
    error = wire.ErrorInfo(status=status, type="invalid_request_error", code=code, message=message, param=param)
    return web.Response(status=status, body=wire.write_error(error), content_type=wire.CONTENT_TYPE)


async def embed(request: web.Request) -> web.Response:
    try:
        req = wire.read_embedding_request(await request.read())
    except Exception as exc:  # a buffer we cannot read is the caller's fault
        return _error(400, f"Unreadable request: {exc}", "bad_buffer")
    try:
        answer = embedding.embed(req)
    except embedding.Refused as exc:
        return _error(400, str(exc), "invalid_request", exc.param)
    usage = wire.Usage(prompt_tokens=answer.prompt_tokens, total_tokens=answer.prompt_tokens)
    body = wire.write_embeddings(wire.Embeddings(model=req.model_name or "", vectors=answer.vectors, usage=usage))
    return web.Response(body=body, content_type=wire.CONTENT_TYPE)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def create_demo_app(delay_s: float = 0.0, kv_cache: KvCacheSettings | None = None) -> web.Application:
    """The demo service: `delay_s` between streamed tokens; `kv_cache`, its simulated prefix cache (None: off)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[DELAY] = delay_s
    app[KV_CACHE] = KvCache(kv_cache or KvCacheSettings())
    app.router.add_post(wire.COMPLETE_PATH, complete)
    app.router.add_post(wire.EMBED_PATH, embed)
    app.router.add_get("/healthz", healthz)
    name_server(app)
    return app
