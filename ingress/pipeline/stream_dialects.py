"""A stream in another dialect's events: Anthropic's Messages (`stream_messages`), Google's Gemini
(`stream_gemini`) and OpenAI's Responses (`stream_response`), each `stream` (pipeline/stream.py) with its
dialect's translator, or its chat chunks made into the dialect's events."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from ingress.anthropic.messages import MessagesRequest
from ingress.errors import IngressError
from ingress.exchange import Exchange
from ingress.gemini.contents_to_chat import Read as GeminiRead
from ingress.oai import chat_answers, responses_answers
from ingress.pipeline.answer import message_id
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Completion, Prepared
from ingress.pipeline.stream import (
    DONE,
    HEARTBEAT,
    OPENED,
    Burst,
    Direct,
    Failed,
    Signal,
    StreamEvent,
    stream,
    translator_for,
)
from ingress.translate.gemini import GeminiStreamTranslator
from ingress.translate.messages import MessagesStreamTranslator
from ingress.translate.responses_events import ResponseEvents
from ingress.translate.stream import Delta, StreamTranslator


@dataclass(frozen=True, slots=True)
class ResponsesBurst:
    """The Responses events of what arrived in one read: the edge sends them in one write."""

    events: list[responses_answers.StreamEvent]


ResponsesStreamEvent = responses_answers.StreamEvent | ResponsesBurst | Signal | Failed
Keep = Callable[[responses_answers.ResponseObject], Awaitable[None]]  # stores a completed response


async def stream_messages(gateway: Gateway, request: MessagesRequest, prepared: Prepared[Completion],
                          exchange: Exchange,
                          direct: Direct | None = None) -> AsyncGenerator[StreamEvent, None]:
    """A streamed Messages answer: `stream` with Anthropic's translator, its events in place of chunks.
    Its message_start goes first, as soon as the answer begins (before a ping while the service is
    silent), with the edge's count of the prompt until the service counts it. `direct` as for `stream`:
    it takes events only once the head, and with it message_start, is out."""
    translator = MessagesStreamTranslator(id=message_id(exchange), model=request.model,
                                          input_tokens=prepared.prompt_tokens,
                                          verify=gateway.settings.verify_answers)
    async with aclosing(stream(gateway, prepared, exchange, direct, translator)) as events:
        async for event in events:
            if event is OPENED:
                yield OPENED
            if event is OPENED or event is HEARTBEAT:
                for start in translator.begin():
                    yield start
            if event is not OPENED:
                yield event


def stream_gemini(gateway: Gateway, read: GeminiRead, prepared: Prepared[Completion], exchange: Exchange,
                  direct: Direct | None = None) -> AsyncGenerator[StreamEvent, None]:
    """A streamed Gemini answer (streamGenerateContent): `stream` with Google's translator, each event a
    partial GenerateContentResponse, the last with the finish reasons and usage."""
    translator = GeminiStreamTranslator(id=exchange.request_id, model=read.request.model,
                                        include_thoughts=read.include_thoughts, verify=gateway.settings.verify_answers)
    return stream(gateway, prepared, exchange, direct, translator)


async def stream_response(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange,
                          events: ResponseEvents, keep: Keep | None = None
                          ) -> AsyncGenerator[ResponsesStreamEvent, None]:
    """A streamed Responses answer: `stream`'s chat chunks made into Responses events by `events`.
    Failed passes through: the edge asks `events` for the failure's own events (it meets failures of
    its own, such as the drain's deadline). `keep`: what stores the final response (pipeline/stored.py),
    awaited before response.completed is sent, so that it is readable once the client has it; when it
    cannot be kept, the stream ends Failed instead."""
    translator = translator_for(gateway, prepared, exchange)
    assert isinstance(translator, StreamTranslator)  # a Responses request travels as a chat request
    async with aclosing(stream(gateway, prepared, exchange, translator=translator)) as chunks:
        async for event in chunks:
            made: list[responses_answers.StreamEvent]
            if type(event) is Delta:
                made = events.feed(event.chunk())
            elif type(event) is chat_answers.ChatCompletionChunk:
                made = events.feed(event, translator.signature)
            elif type(event) is Burst:
                made = []
                for chunk in event.chunks:
                    chunk = chunk.chunk() if type(chunk) is Delta else chunk
                    assert type(chunk) is chat_answers.ChatCompletionChunk, chunk
                    made += events.feed(chunk, translator.signature)
            elif event is OPENED:
                yield OPENED
                made = events.opened()
            elif event is DONE:
                made = events.closed()
                final = events.final(exchange.answer.usage)
                if keep is not None:
                    try:
                        await keep(final)
                    except IngressError as exc:
                        if made:
                            yield ResponsesBurst(made)
                        exchange.answer.failure = exc
                        yield Failed(exc)
                        return
                made.append(events.completion(final))
            else:
                assert isinstance(event, Signal | Failed), event
                yield event
                continue
            if len(made) == 1:
                yield made[0]
            elif made:
                yield ResponsesBurst(made)  # the events of one read, in one write
            if event is DONE:
                yield DONE

