"""Translate the answers to a legacy text completion into OpenAI `text_completion` objects (sans-I/O).

A text completion is answered as a chat one is (CompletionResponse, CompletionChunk frames): a choice's
content is its text, its content logprobs are its `logprobs` in the legacy shape (tokens, token_logprobs,
top_logprobs as token → logprob, text_offset). The stream's order, completion and usage checks are
StreamTranslator's.

A text's tokens are its end: the first one starts at the text's length less the tokens' (so an echoed
prompt in front of them, which has no logprobs, is counted in the offsets), and each next one where the
last ended. Streamed, the offsets continue over the choice's text sent so far: whatever the chunks, they
are those of the whole answer.
"""

from __future__ import annotations

from msgspec import UNSET

from ingress.oai import chat_answers
from ingress.oai.completions import TextChoiceOut, TextCompletion, TextLogprobsOut
from ingress.translate.completion import translate_finish, translate_logprobs, translate_usage
from ingress.translate.stream import StreamTranslator
from ingress.wire import types as wire_types


def text_logprobs(tokens: list[chat_answers.TokenLogprobOut], text: str, before: int = 0) -> TextLogprobsOut:
    """The legacy `logprobs` of `tokens`, which arrived with `text`, `before` characters into the choice."""
    offset = before + max(0, len(text) - sum(len(t.token) for t in tokens))
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return TextLogprobsOut(tokens=[t.token for t in tokens], token_logprobs=[t.logprob for t in tokens],
                           top_logprobs=[_top(t.top_logprobs) for t in tokens], text_offset=offsets)


def _top(alternatives: list[chat_answers.TopLogprobOut]) -> dict[str, float]:
    top: dict[str, float] = {}
    for a in alternatives:
        top.setdefault(a.token, a.logprob)  # most likely first: a repeated token keeps its first logprob
    return top


def _content(logprobs: chat_answers.LogprobsOut | None) -> list[chat_answers.TokenLogprobOut] | None:
    return logprobs.content if logprobs is not None else None


def translate_text_response(r: wire_types.Response) -> TextCompletion:
    choices = []
    for c in r.choices:
        text, tokens = c.content or "", _content(translate_logprobs(c.logprobs, None))
        choices.append(TextChoiceOut(text=text, index=c.index, finish_reason=translate_finish(c.finish_reason),
                                     logprobs=text_logprobs(tokens, text) if tokens is not None else None))
    return TextCompletion(
        id=r.id, created=r.created, model=r.model, choices=choices,
        usage=translate_usage(r.usage) if r.usage is not None else UNSET,
        system_fingerprint=r.system_fingerprint if r.system_fingerprint is not None else UNSET,
    )


class TextStreamTranslator:
    """Per-request stream state, as StreamTranslator's, and the characters of each choice's text sent so
    far; each chat chunk it makes becomes a text one (a chunk with neither text, tokens nor a finish
    reason, such as the one naming the role, is not sent)."""

    def __init__(self, *, id: str, model: str, created: int, include_usage: bool, verify: bool = True) -> None:
        self._chat = StreamTranslator(id=id, model=model, created=created, include_usage=include_usage,
                                      verify=verify)
        self._sent: dict[int, int] = {}  # choice index → characters of its text sent

    @property
    def done(self) -> bool:
        return self._chat.done

    @property
    def usage(self) -> wire_types.Usage | None:
        return self._chat.usage

    @property
    def output(self) -> list[str]:
        return self._chat.output

    @property
    def served_model(self) -> str | None:
        return self._chat.served_model

    @property
    def id(self) -> str:
        return self._chat.id

    @property
    def finish_reasons(self) -> list[str]:
        return self._chat.finish_reasons

    def read_frame(self, frame: bytes) -> list[TextCompletion]:
        """One whole frame → zero or more text chunks (a `FrameTranslator`, as StreamTranslator is)."""
        return [text for chunk in self._chat.feed_frame(frame) if (text := self._text_chunk(chunk)) is not None]

    def feed_frame(self, frame: bytes) -> list[TextCompletion]:
        """StreamTranslator's name for its chunks without Deltas, which text makes none of."""
        return self.read_frame(frame)

    def finish(self) -> None:
        self._chat.finish()

    def _text_chunk(self, chunk: chat_answers.ChatCompletionChunk) -> TextCompletion | None:
        choices = []
        for c in chunk.choices:
            text, tokens = c.delta.content or "", _content(c.logprobs)
            if not (text or tokens or c.finish_reason is not None):
                continue
            before = self._sent.get(c.index, 0)
            self._sent[c.index] = before + len(text)
            logprobs = text_logprobs(tokens, text, before) if tokens is not None else None
            choices.append(TextChoiceOut(text=text, index=c.index, finish_reason=c.finish_reason, logprobs=logprobs))
        if chunk.choices and not choices:
            return None
        return TextCompletion(id=chunk.id, created=chunk.created, model=chunk.model, choices=choices,
                              usage=chunk.usage, system_fingerprint=chunk.system_fingerprint)
