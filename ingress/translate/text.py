"""Translate the answers to a legacy text completion into OpenAI `text_completion` objects (sans-I/O).

A text completion is answered as a chat one is (CompletionResponse, CompletionChunk frames): a choice's
content is its text. The stream's order, completion and usage checks are StreamTranslator's.
"""

from __future__ import annotations

from msgspec import UNSET

from ingress.oai import answers as out
from ingress.oai.completions import TextChoiceOut, TextCompletion
from ingress.translate.completion import translate_usage
from ingress.translate.stream import StreamTranslator
from ingress.wire import types as wt


def translate_text_response(r: wt.Response) -> TextCompletion:
    choices = [TextChoiceOut(text=c.content or "", index=c.index, finish_reason=c.finish_reason) for c in r.choices]
    return TextCompletion(
        id=r.id, created=r.created, model=r.model, choices=choices,
        usage=translate_usage(r.usage) if r.usage is not None else UNSET,
        system_fingerprint=r.system_fingerprint if r.system_fingerprint is not None else UNSET,
    )


class TextStreamTranslator:
    """Per-request stream state, as StreamTranslator's; each chat chunk it makes becomes a text one
    (a chunk with neither text nor a finish reason, such as the one naming the role, is not sent)."""

    def __init__(self, *, id: str, model: str, created: int, include_usage: bool, verify: bool = True) -> None:
        self._chat = StreamTranslator(id=id, model=model, created=created, include_usage=include_usage,
                                      verify=verify)

    @property
    def done(self) -> bool:
        return self._chat.done

    @property
    def usage(self) -> wt.Usage | None:
        return self._chat.usage

    def feed_frame(self, frame: bytes) -> list[TextCompletion]:
        return [text for chunk in self._chat.feed_frame(frame) if (text := _text_chunk(chunk)) is not None]

    def finish(self) -> None:
        self._chat.finish()


def _text_chunk(chunk: out.ChatCompletionChunk) -> TextCompletion | None:
    choices = [
        TextChoiceOut(text=c.delta.content or "", index=c.index, finish_reason=c.finish_reason)
        for c in chunk.choices if c.delta.content or c.finish_reason is not None
    ]
    if chunk.choices and not choices:
        return None
    return TextCompletion(id=chunk.id, created=chunk.created, model=chunk.model, choices=choices,
                          usage=chunk.usage, system_fingerprint=chunk.system_fingerprint)
