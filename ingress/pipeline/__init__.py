"""The whole request path on one screen, as named stages, each in a module of this package.

    JSON     prepare   decode → route → passport → encode                   CPU only: bad input raises here
             recall / kept_input / keep  a Responses request's stored state (ingress/state): the response
                       it continues read before prepare, its conversation sized before admission, the
                       completed answer stored before the client has all of it
             prepare_text  the same, for a legacy text completion          then complete/stream: text_completion
             prepare_responses  the same, for the Responses API: read as the chat request it amounts to
             prepare_messages   the same, for Anthropic's Messages API
             prepare_gemini     the same, for Google's Gemini API (generateContent; countTokens counted;
                                embedContent and batchEmbedContents: prepare_gemini_embeddings)
             complete  send → translate                                    one chat.completion
             respond / stream_response  as complete / stream, answered as a Responses object / events
             answer_message / stream_messages  as complete / stream, answered in Anthropic's shape
             answer_gemini / stream_gemini     as complete / stream, answered in Google's shape
             embed     as prepare, then send → translate                   one embeddings list
                       (embedded: the vectors, for an API that answers them in its own shape)
             stream    send → frames → translate, as StreamEvents         heartbeats while the service is silent;
                       a `direct` callable takes chunks in the upstream connection's callback (the edge's outlet)
    binary   relay     verify → route on fields read in place → send the same bytes → the answer's bytes
    tenancy  (authenticate, in the edge's middleware) → prepare: the key may use the model →
             admit     the request's limits in one round trip to the store: a refusal raises, having
                       consumed nothing; the reservation is held on the exchange
    always   settle    after every end (an answer, an error, a client gone): the endpoint's slot is let go,
                       and the reservation is charged the real usage (refund or debt), off the response path

Only the edge renders bytes for the client: the stages yield typed events, and raise IngressErrors.

    gateway.py  what every request shares          prepare.py  the CPU-only stages
    admit.py    admit and settle (tenancy)         send.py     endpoint choice, retries, the fallback chain
    answer.py   complete, respond, answer_message, answer_gemini, count_by_service, embed, embedded
    stream.py   stream, its events             stream_dialects.py  stream_messages, stream_gemini, stream_response
    relay.py    relay                              stored.py   recall, kept_input, keep
    cache.py    a route's response cache in front of send: a hit runs the stage's attempt on the stored answer
"""

from __future__ import annotations

from ingress.pipeline.admit import admit, settle, used
from ingress.pipeline.answer import (
    answer_gemini,
    answer_message,
    complete,
    count_by_service,
    embed,
    embedded,
    respond,
    sealing_for,
)
from ingress.pipeline.gateway import EncodeRequest, Gateway
from ingress.pipeline.prepare import Completion, Prepared, prepare, prepare_embeddings, prepare_responses, prepare_text
from ingress.pipeline.prepare_gemini import prepare_gemini, prepare_gemini_count, prepare_gemini_embeddings
from ingress.pipeline.prepare_messages import prepare_count, prepare_messages
from ingress.pipeline.relay import RELAYED_HEADERS, RelayedAnswer, relay
from ingress.pipeline.send import send
from ingress.pipeline.stored import Recalled, keep, kept_input, recall
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
)
from ingress.pipeline.stream_dialects import (
    ResponsesBurst,
    ResponsesStreamEvent,
    stream_gemini,
    stream_messages,
    stream_response,
)

__all__ = [
    "DONE",
    "HEARTBEAT",
    "OPENED",
    "RELAYED_HEADERS",
    "Burst",
    "Completion",
    "Direct",
    "EncodeRequest",
    "Failed",
    "Gateway",
    "Prepared",
    "Recalled",
    "RelayedAnswer",
    "ResponsesBurst",
    "ResponsesStreamEvent",
    "Signal",
    "StreamEvent",
    "admit",
    "answer_gemini",
    "answer_message",
    "complete",
    "count_by_service",
    "embed",
    "embedded",
    "keep",
    "kept_input",
    "prepare",
    "prepare_count",
    "prepare_embeddings",
    "prepare_gemini",
    "prepare_gemini_count",
    "prepare_gemini_embeddings",
    "prepare_messages",
    "prepare_responses",
    "prepare_text",
    "recall",
    "relay",
    "respond",
    "sealing_for",
    "send",
    "settle",
    "stream",
    "stream_gemini",
    "stream_messages",
    "stream_response",
    "used",
]
