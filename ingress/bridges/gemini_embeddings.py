"""Google's Gemini API's embeddings, as the bridge's (sans-I/O): our EmbeddingRequest → `POST {target}/v1beta/
models/{model}:batchEmbedContents`, a request per input (its text as the content's one part, the request's
`dimensions` as each one's `outputDimensionality`, the route's model as each one's `models/{model}`), with the
key as `x-goog-api-key`; Google's answer (`embeddings[].values`, in the requests' order; `usageMetadata` when it
counts) → our Embeddings. A request that came to the edge in Google's own API carries its body as sent
(`gemini_json`): that is what goes (an `embedContent` body as a batch of one), each request naming the route's
model, with its taskType and title.

Token-id inputs are a 400 `unsupported_parameter` naming `input[i]`: Google embeds text. `user` has nothing to
send. The answer is read leniently (what Google adds is ignored) but never wrongly: one vector per input, else
a 502 `upstream_protocol_error`; vectors of the length asked, else a 400 naming `dimensions`, as the openai
dialect's. Google's errors are the dialect's (`GeminiDialect.error`)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ingress.bridges.dialect import EngineFailed, EngineRequest, Target, Unsupported, count, sized_as_asked
from ingress.bridges.failures import protocol_error
from ingress.bridges.gemini_request import model_path, request_headers
from ingress.wire import types as wire_types
from ingress.wire.embeddings import EmbeddingRequestData, Embeddings, read_embedding_request_data

_json = msgspec.json.Encoder()


@dataclass
class EmbeddingsCall:
    request: EngineRequest
    model: str
    inputs: int
    dimensions: int | None

    def answer(self, body: bytes) -> Embeddings:
        return read_embeddings(body, model=self.model, inputs=self.inputs, dimensions=self.dimensions)


def build_embeddings(buf: bytes, target: Target) -> EmbeddingsCall:
    """The call for a verified EmbeddingRequest buffer, to the route's model (the buffer's), else the target's."""
    request = read_embedding_request_data(buf)
    model = (request.model_name or target.model or "").removeprefix("models/")
    if not model:
        raise Unsupported("model", "The bridge has no model name to send to Google.")
    if request.gemini_json is not None:  # a Gemini client's, as it sent it
        body = _as_sent(request.gemini_json, f"models/{model}")
    else:
        body = _json.encode({"requests": _requests_of(request, f"models/{model}")})
    engine = EngineRequest(path=model_path(target, model, "batchEmbedContents"), headers=request_headers(target),
                           body=body, stream=False)
    return EmbeddingsCall(engine, model=model, inputs=len(request.inputs or ()), dimensions=request.dimensions)


def _requests_of(request: EmbeddingRequestData, model: str) -> list[dict[str, object]]:
    """A batch request per input: its text, the dimensions asked, the route's model."""
    requests = []
    for i, item in enumerate(request.inputs or ()):
        if item.text is None:
            raise Unsupported(f"input[{i}]", f"Google embeds text: input {i} is token ids, which its API does not "
                                             "take.")
        one: dict[str, object] = {"model": model, "content": {"parts": [{"text": item.text}]}}
        if request.dimensions is not None:
            one["outputDimensionality"] = request.dimensions
        requests.append(one)
    return requests


_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_requests = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])


def _as_sent(sent: str, model: str) -> bytes:
    """A Gemini client's embedContent or batchEmbedContents body as batchEmbedContents takes it, every field as
    the client wrote it but each request's model, which is the route's."""
    fields = _fields.decode(sent)
    named = msgspec.Raw(_json.encode(model))
    if "requests" in fields:
        requests = [{**r, "model": named} for r in _requests.decode(fields["requests"])]
    else:  # embedContent's body: one request
        requests = [{**fields, "model": named}]
    return _json.encode({"requests": requests})


class _Embedding(msgspec.Struct):
    values: list[float] | None = None


class _Usage(msgspec.Struct, rename="camel"):
    prompt_token_count: int | None = None
    total_token_count: int | None = None


class _Batch(msgspec.Struct, rename="camel"):
    embeddings: list[_Embedding] | None = None
    usage_metadata: _Usage | None = None


_batch = msgspec.json.Decoder(_Batch)


def read_embeddings(body: bytes, *, model: str, inputs: int, dimensions: int | None) -> Embeddings:
    """Google's batchEmbedContents answer as ours: `inputs` vectors in the requests' order, of `dimensions`
    floats when they were asked, with Google's counts as usage when it gave them."""
    try:
        answer = _batch.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EngineFailed(protocol_error(f"Google's embeddings answer could not be read: {exc}")) from None
    items = answer.embeddings or []
    if len(items) != inputs:
        raise EngineFailed(protocol_error(f"Google answered {len(items)} embeddings for {inputs} inputs."))
    vectors = []
    for i, item in enumerate(items):
        if not item.values:
            raise EngineFailed(protocol_error(f"Google's embedding {i} has no values."))
        vectors.append(item.values)
    sized_as_asked(vectors, dimensions, "Google")
    usage = None
    if answer.usage_metadata is not None and answer.usage_metadata.prompt_token_count is not None:
        prompt = count(answer.usage_metadata.prompt_token_count)
        usage = wire_types.Usage(prompt_tokens=prompt,
                                 total_tokens=count(answer.usage_metadata.total_token_count) or prompt)
    return Embeddings(model=model, vectors=vectors, usage=usage)
