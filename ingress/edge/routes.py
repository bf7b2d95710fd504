"""The routes: which endpoint answers each method and path."""

from __future__ import annotations

from aiohttp import web

from ingress.edge.endpoints import (
    chat_completions,
    completions,
    embeddings,
    get_model,
    list_models,
    responses,
    responses_socket,
    stored_response,
)
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
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model:.+}", get_model)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
