"""Google's Gemini API, under `/v1beta/` and `/v1/` (the `google-genai` SDK given a base URL sends the latter):
`POST models/{model}:generateContent`, `:streamGenerateContent` (server-sent events with `?alt=sse`, else a
JSON array that grows), `:countTokens`, `:embedContent`, `:batchEmbedContents`, and `GET models`,
`models/{model}`. Each request is read as the chat request (or the embeddings request) it amounts to, served
by whatever its route names, and answered in Google's shape; errors in Google's envelope (the middleware
renders them so for every request `speaks_gemini` recognizes).

The key: `x-goog-api-key`, else the `key` query parameter, else `Authorization: Bearer`."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from aiohttp import web

from ingress import pipeline
from ingress.edge import endpoints
from ingress.edge.appkeys import DRAIN, EXCHANGE, GATEWAY
from ingress.edge.bodies import read_body
from ingress.edge.sse import GeminiArrayWriter, GeminiSseWriter
from ingress.edge.writers import Outlet, json_response, write_stream
from ingress.encoding.passport import RequestMeta
from ingress.errors import NotFound, UpstreamAnswered
from ingress.gemini.answers import METHODS, CountTokensResponse, model_info, model_list
from ingress.tenancy.policy import presented_key
from ingress.translate.embeddings import translate_gemini_embeddings

API = "gemini"
COUNT_API = "gemini_count_tokens"  # a family of its own in a usage record: a count, not a generation
EMBED_API = "gemini_embeddings"
GOOGLE_KEY = "x-goog-api-key"
_GOOGLE_CLIENT = "x-goog-api-client"  # every Google SDK's request names the SDK
_VERSIONS = ("/v1beta/", "/v1/")


def split_name(name: str) -> tuple[str, str]:
    """A path's last segment, `{model}:{method}`, as (model, method); the method "" when there is no colon.
    A model's own name may hold colons (`llama3:8b`): the method follows the last."""
    model, colon, method = name.rpartition(":")
    return (model, method) if colon else (name, "")


def google_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The key a Google client presents: `x-goog-api-key`, else `?key=`, else the usual headers
    (`Authorization: Bearer`, `x-api-key`)."""
    return headers.get(GOOGLE_KEY) or query.get("key") or presented_key(headers)


def speaks_gemini(path: str, method: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """A client of Google's API: every path under /v1beta/; under /v1/models, a POST (only Google's methods
    take one there) or a request of a Google SDK or with a Google key (OpenAI's and Anthropic's clients list
    models at the same path)."""
    if path.startswith("/v1beta/") or path == "/v1beta":
        return True
    if not path.startswith("/v1/models"):
        return False
    return method == "POST" or GOOGLE_KEY in headers or _GOOGLE_CLIENT in headers or "key" in query


def gemini_client(request: web.Request) -> bool:
    return speaks_gemini(request.path, request.method, request.headers, request.query)


def _meta(request: web.Request) -> RequestMeta:
    """As the OpenAI endpoints', with the key Google's clients send."""
    meta = endpoints.request_meta(request)
    key = google_key(request.headers, request.query)
    if meta.api_key is None and key:
        meta = msgspec.structs.replace(meta, api_key=key)
    return meta


async def model_method(request: web.Request) -> web.StreamResponse:
    """`POST .../models/{model}:{method}`: the method after the colon decides."""
    model, method = split_name(request.match_info["name"])
    if method == "generateContent":
        return await _generate(request, model, stream=False)
    if method == "streamGenerateContent":
        return await _generate(request, model, stream=True)
    if method == "countTokens":
        return await _count(request, model)
    if method in ("embedContent", "batchEmbedContents"):
        return await _embed(request, model, batch=method == "batchEmbedContents")
    request[EXCHANGE].api = API
    shown = method[:64] if method.isascii() and method.isprintable() else "..."
    raise NotFound(f"Method '{shown}' is not found for models: this edge serves {', '.join(METHODS[:-1])} and "
                   f"{METHODS[-1]}.", code="unknown_method")


async def _generate(request: web.Request, model: str, *, stream: bool) -> web.StreamResponse:
    gateway, drain, exchange = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    exchange.api = API
    body = await read_body(request, gateway.settings.max_body_bytes)
    read, prepared = pipeline.prepare_gemini(gateway, body, _meta(request), exchange, model=model, stream=stream)
    await pipeline.admit(gateway, prepared, exchange)
    if not stream:
        with drain.deadline():
            answer = await pipeline.answer_gemini(gateway, read, prepared, exchange)
        return json_response(answer)
    sse = request.query.get("alt") == "sse"
    writer: GeminiSseWriter | GeminiArrayWriter = GeminiSseWriter() if sse else GeminiArrayWriter()
    outlet = Outlet(request, writer)
    events = pipeline.stream_gemini(gateway, read, prepared, exchange, outlet)
    return await write_stream(request, exchange, events, writer, outlet,
                              content_type="text/event-stream" if sse else "application/json")


async def _count(request: web.Request, model: str) -> web.Response:
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = COUNT_API
    body = await read_body(request, gateway.settings.max_body_bytes)
    tokens, prepared = pipeline.prepare_gemini_count(gateway, body, _meta(request), exchange, model=model)
    if prepared is not None:  # the route asks Google to count
        with request.app[DRAIN].deadline():
            tokens = await pipeline.count_by_service(gateway, prepared, exchange)
    return json_response(CountTokensResponse(total_tokens=tokens))


async def _embed(request: web.Request, model: str, *, batch: bool) -> web.Response:
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = EMBED_API
    body = await read_body(request, gateway.settings.max_body_bytes)
    prepared = pipeline.prepare_gemini_embeddings(gateway, body, _meta(request), exchange, model=model, batch=batch)
    await pipeline.admit(gateway, prepared, exchange)
    try:
        with request.app[DRAIN].deadline():
            embeddings = await pipeline.embedded(gateway, prepared, exchange)
    except UpstreamAnswered as exc:
        if exc.param != "dimensions":
            raise
        # The service refused the contract's `dimensions` (an engine that does not honour it): the client's
        # field is outputDimensionality, which every request of a batch asked alike.
        raise UpstreamAnswered(exc.status, exc.type, exc.code, exc.message,
                               "requests[0].output_dimensionality" if batch else "output_dimensionality",
                               retry_after=exc.retry_after) from exc
    return json_response(translate_gemini_embeddings(embeddings, batch=batch))


async def list_models(request: web.Request) -> web.StreamResponse:
    """`GET /v1beta/models`, and `/v1/models` for a Google client: every model in one page."""
    if not gemini_client(request):
        return await endpoints.list_models(request)
    request[EXCHANGE].api = "models"
    return json_response(model_list(endpoints.listed_models(request)))


async def get_model(request: web.Request) -> web.StreamResponse:
    """`GET /v1beta/models/{model}`, and under /v1/ for a Google client (the name may come as `models/x`)."""
    if not gemini_client(request):
        return await endpoints.get_model(request)
    request[EXCHANGE].api = "models"
    model = request.match_info["model"].removeprefix("models/")
    if model not in endpoints.listed_models(request):
        raise NotFound(f"Model 'models/{model}' is not found, or you do not have access to it.", param="model",
                       code="model_not_found")
    return json_response(model_info(model))


def add_routes(app: web.Application) -> None:
    """Google's paths, under each version; `/v1/models` and `/v1/models/{model}` are shared with the other
    dialects (the handlers tell Google's clients apart)."""
    for version in _VERSIONS:
        app.router.add_post(f"{version}models/{{name:.+}}", model_method)
    app.router.add_get("/v1beta/models", list_models)
    app.router.add_get("/v1beta/models/{model:.+}", get_model)
