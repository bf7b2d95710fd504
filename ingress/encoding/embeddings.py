"""An OpenAI embeddings request encoded as an EmbeddingRequest (the table, its answers and their readers:
ingress/wire/embeddings.py)."""

from __future__ import annotations

from ingress.oai.embeddings import EmbeddingRequest
from ingress.wire.embeddings import EmbeddingInputData, EmbeddingRequestData, encode_embedding_request_data
from ingress.wire.encode import PROVIDERS
from ingress.wire.types import PassportData


def _input(value: str | list[int]) -> EmbeddingInputData:
    return EmbeddingInputData(text=value) if isinstance(value, str) else EmbeddingInputData(tokens=value)


def embedding_request_data(request: EmbeddingRequest, request_id: str, passport: PassportData,
                           provider: str = "openai", model_name: str | None = None,
                           gemini_json: str | None = None) -> EmbeddingRequestData:
    """`model_name` replaces the requested name (a route's alias resolved to the upstream's name);
    `gemini_json`: a Gemini client's body as sent, on a route bound for Google."""
    return EmbeddingRequestData(
        request_id=request_id,
        provider=PROVIDERS[provider],
        model_name=model_name or request.model,
        inputs=[_input(value) for value in request.inputs],
        dimensions=request.dimensions,
        base64=request.encoding_format == "base64",
        user=request.user,
        passport=passport,
        gemini_json=gemini_json,
    )


def encode_embedding_request(request: EmbeddingRequest, request_id: str, passport: PassportData,
                             provider: str = "openai", model_name: str | None = None,
                             gemini_json: str | None = None) -> bytearray:
    """One EmbeddingRequest buffer (identifier LGEQ)."""
    return encode_embedding_request_data(embedding_request_data(request, request_id, passport, provider, model_name,
                                                                gemini_json))
