"""An OpenAI chat request through the stock flatbuffers.Builder (ingress/wire/stock.py): the reference tests
compare the generated encoder with, and the baseline the benchmarks swap into an edge. Not on the request path."""

from __future__ import annotations

from ingress.encoding.requests import request_data
from ingress.oai import chat
from ingress.wire.stock import BuilderPool, encode_request_data_stock
from ingress.wire.types import PassportData


def encode_request_stock(pool: BuilderPool, request: chat.ChatCompletionRequest, request_id: str,
                         passport: PassportData, provider: str = "openai", model_name: str | None = None,
                         extra_json: str | None = None) -> bytes:
    data = request_data(request, request_id, passport, provider, model_name, extra_json)
    return encode_request_data_stock(pool, data)
