"""complete / respond / answer_message / answer_gemini / count_by_service / embed: one whole answer each."""

from __future__ import annotations

from ingress.anthropic import answers as anthropic_answers
from ingress.anthropic.messages import MessagesRequest
from ingress.cache.entries import EMBEDDINGS, WHOLE
from ingress.errors import UpstreamProtocolError
from ingress.exchange import Exchange
from ingress.gemini.answers import GenerateContentResponse
from ingress.gemini.contents_to_chat import Read
from ingress.oai import chat_answers
from ingress.oai.completions import TextCompletion, TextCompletionRequest
from ingress.oai.embeddings import EmbeddingList, EmbeddingRequest
from ingress.oai.responses import Call
from ingress.oai.responses_answers import ResponseObject
from ingress.oai.sealing import Kind, Sealed
from ingress.pipeline.cache import send_cached
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Completion, Prepared
from ingress.pipeline.send import send
from ingress.routing.chain import FILTERED_FINISH
from ingress.translate.completion import translate_response
from ingress.translate.embeddings import translate_embeddings
from ingress.translate.gemini import response_from_answer
from ingress.translate.messages import message_from_response
from ingress.translate.responses import Seal, translate_response_object
from ingress.translate.text import translate_text_response
from ingress.upstream.group import Lease
from ingress.wire.answer import decode_answer
from ingress.wire.embeddings import Embeddings, decode_embeddings_answer
from ingress.wire.identifiers import COUNT_PATH
from ingress.wire.types import Response, Usage


async def complete(gateway: Gateway, prepared: Prepared[Completion],
                   exchange: Exchange) -> chat_answers.ChatCompletion | TextCompletion:
    """A non-streamed chat (or text) completion. Any failure raises, before the client was sent anything."""
    response = await _completed(gateway, prepared, exchange)
    if isinstance(prepared.request, TextCompletionRequest):
        return translate_text_response(response)
    return translate_response(response, legacy_functions=prepared.request.legacy_functions)


async def _completed(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange) -> Response:
    """Send, and decode the one answer (an Error answer raises)."""

    async def attempt(lease: Lease, ready: Prepared[Completion]) -> Response:
        answer = await lease.client.complete(ready.encoded, ready.headers, ready.timeouts)
        try:
            return decode_answer(answer, verify_answer=gateway.settings.verify_answers)  # an Error answer raises
        except UpstreamProtocolError as exc:  # a whole answer arrived: the generation ran
            raise UpstreamProtocolError(exc.message, after_head=True) from exc.__cause__

    response = await send_cached(gateway, prepared, exchange, attempt, WHOLE,
                                 reroute=prepared.rerouter(gateway, exchange), refused=filtered)
    answered(exchange, response.usage, response.model)
    if exchange.trace is not None:
        exchange.trace.answered(response.id, [c.finish_reason for c in response.choices if c.finish_reason],
                          [c.content or "" for c in response.choices])
    return response


def answered(exchange: Exchange, usage: Usage | None, model: str) -> None:
    """A whole answer came: the endpoint did its job; its usage and the model it named, on the exchange."""
    answer = exchange.answer
    answer.upstream_ok = True
    answer.began()
    answer.usage, answer.served_model = usage, model or None


def sealing_for(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange) -> Seal:
    """What seals a Responses answer's reasoning and compactions, naming the route that served them (read
    when sealing: a fallback may have served)."""

    def seal(kind: Kind, text: str, own: str | None) -> str:
        match = exchange.attempts.served or prepared.match
        if own is not None and match.route.responses == "whole":
            return own  # OpenAI's own sealed reasoning, which goes back to it as it came
        return gateway.sealer.seal(kind, Sealed(text=text, provider=match.route.provider, model=match.upstream_model))

    return seal


def filtered(response: Response) -> bool:
    """An answer a content filter ended (a chain may fall back on it: ingress/routing/chain.py)."""
    return any(choice.finish_reason in FILTERED_FINISH for choice in response.choices)


async def respond(gateway: Gateway, call: Call, prepared: Prepared[Completion], exchange: Exchange,
                  rid: str | None = None) -> ResponseObject:
    """A non-streamed Responses answer, sent as `complete` sends; `rid`: what its ids are made of (the
    request's id unless the answer is stored: pipeline/stored.py)."""
    response = await _completed(gateway, prepared, exchange)
    return translate_response_object(call, response, request_id=rid or exchange.request_id,
                                     seal=sealing_for(gateway, prepared, exchange))


async def answer_message(gateway: Gateway, request: MessagesRequest, prepared: Prepared[Completion],
                         exchange: Exchange) -> anthropic_answers.Message:
    """A non-streamed Messages answer, sent as `complete` sends, in Anthropic's shape."""
    response = await _completed(gateway, prepared, exchange)
    return message_from_response(response, id=message_id(exchange), model=request.model)


async def answer_gemini(gateway: Gateway, read: Read, prepared: Prepared[Completion],
                        exchange: Exchange) -> GenerateContentResponse:
    """A non-streamed Gemini answer (generateContent), sent as `complete` sends, in Google's shape: its
    thoughts shown only when the request asked for them (`includeThoughts`)."""
    response = await _completed(gateway, prepared, exchange)
    return response_from_answer(response, id=exchange.request_id, model=read.request.model,
                                include_thoughts=read.include_thoughts)


async def count_by_service(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange) -> int:
    """A prompt counted by the service (a bridge asking its provider), sent as `complete` sends: the
    answer is a CompletionResponse whose usage is the count."""

    async def attempt(lease: Lease, ready: Prepared[Completion]) -> Response:
        answer = await lease.client.complete(ready.encoded, ready.headers, ready.timeouts, path=COUNT_PATH)
        try:
            return decode_answer(answer, verify_answer=gateway.settings.verify_answers)  # an Error answer raises
        except UpstreamProtocolError as exc:
            raise UpstreamProtocolError(exc.message, after_head=True) from exc.__cause__

    response = await send(gateway, prepared, exchange, attempt)
    exchange.answer.upstream_ok = True
    if response.usage is None:
        raise UpstreamProtocolError("The model service answered a count without its usage.", after_head=True)
    return response.usage.prompt_tokens


def message_id(exchange: Exchange) -> str:
    return f"msg_{exchange.request_id}"


async def embed(gateway: Gateway, prepared: Prepared[EmbeddingRequest], exchange: Exchange) -> EmbeddingList:
    """One embeddings answer in OpenAI's shape; as embedded."""
    embeddings = await embedded(gateway, prepared, exchange)
    return translate_embeddings(embeddings, as_base64=prepared.request.encoding_format == "base64")


async def embedded(gateway: Gateway, prepared: Prepared[EmbeddingRequest], exchange: Exchange) -> Embeddings:
    """One embeddings answer, a vector per input, sent as `complete` sends (retries, fallback); any failure
    raises."""
    inputs = len(prepared.request.inputs)

    async def attempt(lease: Lease, ready: Prepared[EmbeddingRequest]) -> Embeddings:
        answer = await lease.client.embed(ready.encoded, ready.headers, ready.timeouts)
        try:
            embeddings = decode_embeddings_answer(answer, verify_answer=gateway.settings.verify_answers)
        except UpstreamProtocolError as exc:  # a whole answer arrived: the service ran
            raise UpstreamProtocolError(exc.message, after_head=True) from exc.__cause__
        if len(embeddings.vectors) != inputs:
            raise UpstreamProtocolError(f"The model service answered {len(embeddings.vectors)} embeddings "
                                        f"for {inputs} inputs.", after_head=True)
        return embeddings

    embeddings = await send_cached(gateway, prepared, exchange, attempt, EMBEDDINGS,
                                   reroute=prepared.rerouter(gateway, exchange))
    answered(exchange, embeddings.usage, embeddings.model)
    return embeddings

