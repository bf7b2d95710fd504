"""The routes: which endpoint answers each method and path (`/v1/models` and `/v1/models/{model}`: the
Gemini module's handlers, which answer a Google client and hand the others to the OpenAI endpoints')."""

from __future__ import annotations

from aiohttp import web

from ingress.edge import conversations, gemini
from ingress.edge.endpoints import (
    chat_completions,
    completions,
    embeddings,
    responses,
    responses_socket,
    stored_response,
)
from ingress.edge.gemini import get_model, list_models
from ingress.edge.messages import count_tokens, messages
from ingress.edge.operational import healthz, metrics_endpoint, readyz


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/responses", responses_socket)
    app.router.add_route("*", "/v1/responses/{response_id}", stored_response)
    app.router.add_route("*", "/v1/responses/{response_id}/{action:cancel|input_items}", stored_response)
    conversations.add_routes(app)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model:.+}", get_model)
    gemini.add_routes(app)  # Google's, under /v1beta/ and /v1/models/{model}:{method}
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
