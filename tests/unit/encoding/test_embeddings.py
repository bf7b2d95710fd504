"""An embeddings request made into its wire table (ingress/encoding/embeddings.py), read back as sent."""

from __future__ import annotations

from typing import Any

import pytest
from bad_embeddings import embeddings_body

from ingress import wire
from ingress.encoding.embeddings import encode_embedding_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire.embeddings import read_embedding_request, read_embedding_request_data
from ingress.wire.passport import Passport

PASSPORT = Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=3, prefix_hash=7, traceparent="tp")


@pytest.mark.parametrize("given", ["héllo 🚀", ["a", "b"], [5, 6], [[1, 2], [2**31 - 1]]])
def test_request_reads_back_as_sent(given: Any) -> None:
    request = decode_embedding_request(embeddings_body(input=given, dimensions=8, encoding_format="base64",
                                                       user="u"))
    buf = bytes(encode_embedding_request(request, "req-1", PASSPORT, "self_hosted", "upstream-name"))
    assert wire.identifiers.identifier_of(buf) == b"LGEQ"
    data = read_embedding_request(buf)
    assert (data.request_id, data.model_name) == ("req-1", "upstream-name")
    assert data.provider == wire.PROVIDERS["self_hosted"]
    assert [i.text if i.text is not None else i.tokens for i in data.inputs or ()] == request.inputs
    assert all((i.text is None) != (i.tokens is None) for i in data.inputs or ())
    assert (data.dimensions, data.base64, data.user, data.passport) == (8, True, "u", PASSPORT)


def test_request_without_options_reads_back_absent() -> None:
    buf = bytes(encode_embedding_request(decode_embedding_request(embeddings_body()), "r", PASSPORT))
    data = read_embedding_request(buf)
    assert (data.model_name, data.dimensions, data.base64, data.user) == ("ingress-demo", None, False, None)


def test_a_verified_request_reads_the_same_without_verifying_again() -> None:
    request = decode_embedding_request(embeddings_body(input=["a", "b"], dimensions=8, user="u"))
    buf = bytes(encode_embedding_request(request, "req-1", PASSPORT, "openai", "upstream-name"))
    assert read_embedding_request_data(buf) == read_embedding_request(buf)
