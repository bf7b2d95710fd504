"""ingress/edge/routes.py: which endpoint answers each method and path."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from ingress.edge import endpoints, gemini, messages, operational
from ingress.edge.routes import add_routes


@pytest.fixture(scope="module")
def app() -> web.Application:
    made = web.Application()
    add_routes(made)
    return made


@pytest.mark.parametrize(("method", "path", "handler"), [
    ("POST", "/v1/chat/completions", endpoints.chat_completions),
    ("POST", "/v1/completions", endpoints.completions),
    ("POST", "/v1/embeddings", endpoints.embeddings),
    ("POST", "/v1/responses", endpoints.responses),
    ("GET", "/v1/responses", endpoints.responses_socket),
    ("GET", "/v1/responses/resp_1", endpoints.stored_response),
    ("DELETE", "/v1/responses/resp_1", endpoints.stored_response),
    ("POST", "/v1/responses/resp_1/cancel", endpoints.stored_response),
    ("GET", "/v1/responses/resp_1/input_items", endpoints.stored_response),
    ("POST", "/v1/messages", messages.messages),
    ("POST", "/v1/messages/count_tokens", messages.count_tokens),
    ("GET", "/v1/models", gemini.list_models),  # Google's shape for its clients, else the endpoints'
    ("GET", "/v1/models/org/a-model:tag", gemini.get_model),
    ("GET", "/healthz", operational.healthz),
    ("GET", "/readyz", operational.readyz),
    ("GET", "/metrics", operational.metrics_endpoint),
])
async def test_each_method_and_path_goes_to_its_endpoint(app: web.Application, method: str, path: str,
                                                          handler: object) -> None:
    match = await app.router.resolve(make_mocked_request(method, path, app=app))
    assert match.http_exception is None and match.handler is handler


async def test_a_models_name_may_hold_slashes() -> None:
    app = web.Application()
    add_routes(app)
    match = await app.router.resolve(make_mocked_request("GET", "/v1/models/org/a-model", app=app))
    assert match.get("model") == "org/a-model"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/chat/completions", 405),
    ("PUT", "/v1/messages", 405),
    ("POST", "/v1/responses/resp_1/other", 404),
    ("GET", "/v2/chat/completions", 404),
    ("POST", "/healthz", 405),
])
async def test_other_methods_and_paths_are_refused(app: web.Application, method: str, path: str, status: int) -> None:
    match = await app.router.resolve(make_mocked_request(method, path, app=app))
    assert match.http_exception is not None and match.http_exception.status == status
