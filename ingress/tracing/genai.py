"""OpenTelemetry's GenAI conventions on the edge's spans: the operations traced, the request's parameters
and prompt as attributes, the error type, a bridge's span around its call to a provider."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ingress.tracing import otlp

if TYPE_CHECKING:
    from ingress.tracing.spans import Span, Tracer

# The endpoints traced, and each one's gen_ai.operation.name (the Responses and Messages APIs are chat
# with another shape: ingress.api names which).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion", "/v1/embeddings": "embeddings",
              "/v1/responses": "chat", "/v1/messages": "chat", "/v1/messages/count_tokens": "count_tokens"}
# Google's, by the method after the model's name (`/v1beta/models/{model}:{method}`, also under /v1/).
GEMINI_OPERATIONS = {"generateContent": "generate_content", "streamGenerateContent": "generate_content",
                     "countTokens": "count_tokens", "embedContent": "embeddings", "batchEmbedContents": "embeddings"}
_GEMINI_MODELS = ("/v1beta/models/", "/v1/models/")


def traced(path: str) -> tuple[str, str] | None:
    """A traced endpoint's gen_ai.operation.name and http.route (for Google's paths the route's template,
    `/v1beta/models/{model}:generateContent`, the model not in it); None: the path is not traced."""
    operation = OPERATIONS.get(path)
    if operation is not None:
        return operation, path
    for prefix in _GEMINI_MODELS:
        if path.startswith(prefix):
            model, colon, method = path[len(prefix):].rpartition(":")  # a model's name may hold colons
            if colon and model and method in GEMINI_OPERATIONS:
                return GEMINI_OPERATIONS[method], f"{prefix}{{model}}:{method}"
    return None
# The request's parameters a span carries: (attribute, the decoded request's field), the first one set.
ASKED = (("gen_ai.request.max_tokens", "max_completion_tokens"), ("gen_ai.request.max_tokens", "max_tokens"),
          ("gen_ai.request.temperature", "temperature"), ("gen_ai.request.top_p", "top_p"),
          ("gen_ai.request.seed", "seed"), ("gen_ai.request.stream", "stream"))



def input_messages(request: object) -> list[dict[str, Any]]:
    """A request's prompt in the GenAI conventions' input-messages shape: each message's role and text (a
    text completion's prompts and embeddings' inputs as user messages; token ids as their list)."""
    from ingress.encoding.requests import message_text
    from ingress.oai.chat import ROLES

    messages = getattr(request, "messages", None)
    if messages is not None:
        return [{"role": ROLES[type(m)], "parts": [{"type": "text", "content": message_text(m)}]} for m in messages]
    texts = getattr(request, "prompts", None) or getattr(request, "inputs", None) or []
    return [{"role": "user", "parts": [{"type": "text", "content": t if isinstance(t, str) else str(t)}]}
            for t in texts]


def error_type(error: BaseException) -> str:
    code = getattr(error, "code", None) or getattr(error, "type", None)
    return str(code) if code else type(error).__qualname__


def provider_span(tracer: Tracer, buf: bytes, dialect: str, target: str, headers: dict[str, str],
                  operation: str = "chat") -> Span | None:
    """A bridge's span around its call to the engine or provider: the child of the span that sent the
    request (its passport's context, read in place), named for the operation ("chat", "embeddings") and
    model; `headers` (the engine request's) then carry its own context on, which vLLM and others continue.
    None when the request is not sampled: the engine is then told the sender's context as it is."""
    from ingress.wire.passport import model_name, trace_context

    traceparent, tracestate = trace_context(buf)
    if not tracer.sampled(traceparent):
        if traceparent:
            headers["traceparent"] = traceparent
            if tracestate:
                headers["tracestate"] = tracestate
        return None
    model = model_name(buf)
    span = tracer.span(f"{operation} {model}" if model else operation, otlp.KIND_CLIENT, traceparent, tracestate,
                       {"gen_ai.operation.name": operation, "gen_ai.provider.name": dialect,
                        "gen_ai.request.model": model, "server.address": target})
    headers["traceparent"] = span.traceparent
    if tracestate:
        headers["tracestate"] = tracestate
    return span


def provider_answered(span: Span, status: int, headers: Mapping[str, str]) -> None:
    """The provider's answer head, on its span: the status and the provider's own request id."""
    span.set_attribute("http.response.status_code", status)
    request_id = headers.get("request-id") or headers.get("x-request-id")
    if request_id:
        span.set_attribute("ingress.provider.request_id", request_id[:128])

