"""Translate a Responses request's streamed answer, chat chunks, into OpenAI's stream events (sans-I/O).

The items are those of the whole `response` object (responses.py). The stream's events follow OpenAI's order:
created, in_progress; per item output_item.added, then its parts and deltas, their .done events and
output_item.done; then completed (or incomplete, when the answer was cut by max_output_tokens or a
content filter) with the whole response and its usage. A failure ends it with `error` and response.failed.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any, TypeVar

from msgspec import UNSET

from ingress.errors import IngressError
from ingress.oai import chat_answers
from ingress.oai.responses import Call
from ingress.oai.responses_answers import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    CustomInputDoneEvent,
    CustomToolCallOut,
    DeltaLogprob,
    DeltaTopLogprob,
    ErrorEvent,
    ErrorOut,
    FunctionCallOut,
    ItemEvent,
    MessageOut,
    OutputItem,
    OutputTextOut,
    PartEvent,
    ReasoningDeltaEvent,
    ReasoningDoneEvent,
    ReasoningItemOut,
    RefusalDeltaEvent,
    RefusalDoneEvent,
    RefusalOut,
    ResponseEvent,
    ResponseObject,
    Status,
    StreamEvent,
    SummaryPartEvent,
    SummaryTextOut,
    TextDeltaEvent,
    TextDoneEvent,
    UsageOut,
)
from ingress.translate.responses import (
    INCOMPLETE,
    Seal,
    compaction_item,
    named,
    reasoning_item,
    response_object,
    usage_out,
)
from ingress.wire import types as wire_types

T = TypeVar("T")


def _delta_logprob(t: chat_answers.TokenLogprobOut) -> DeltaLogprob:
    return DeltaLogprob(token=t.token, logprob=t.logprob,
                        top_logprobs=[DeltaTopLogprob(token=x.token, logprob=x.logprob) for x in t.top_logprobs])


class ResponseEvents:
    """Per-request stream state: chat chunks in, Responses events out, each numbered in order.

    `opened()` when the service has accepted the stream; `feed(chunk)` for each chat chunk;
    `completed(usage)` at its end; `failed(error)` when it breaks (also after the edge's own failures)."""

    def __init__(self, call: Call, *, request_id: str, created_at: int, seal: Seal | None = None) -> None:
        self._call = call
        self._seal = seal
        self._reasoning: ReasoningItemOut | None = None  # the open reasoning item, and its text so far
        self._thought = ""
        self._compacted: list[str] = []  # a compaction's text, answered whole at the end
        self._own: str | None = None  # the provider's own opaque signature of the reasoning, when it gives one
        self._own_unsaid = False  # given, and in no reasoning item yet
        self._rid = request_id
        self.id = f"resp_{request_id}"
        self._created_at = created_at
        self._model = call.request.model
        self._sequence = 0
        self.output: list[OutputItem] = []
        self._message: MessageOut | None = None  # the open message item, and its open part
        self._part: OutputTextOut | RefusalOut | None = None
        self._part_logprobs: list[DeltaLogprob] = []
        self._calls: dict[int, FunctionCallOut | CustomToolCallOut] = {}  # open, by the chat call index
        self._names: dict[int, str] = {}  # their names as the model gave them (flat, for namespaced tools)
        self._finish: str | None = None
        self._service_tier: str | None = None
        self._opened = False
        self.ended = False

    def _n(self) -> int:
        n, self._sequence = self._sequence, self._sequence + 1
        return n

    def _snapshot(self, status: str, usage: UsageOut | None = None, error: ErrorOut | None = None) \
            -> ResponseObject:
        return response_object(self._call, id=self.id, created_at=self._created_at, model=self._model,
                               status=status, output=list(self.output), usage=usage, error=error,
                               finish_reason=self._finish if status == "completed" else None,
                               service_tier=self._service_tier)

    def snapshot(self, status: str) -> ResponseObject:
        """The response as it stands (a background response's, kept while it runs: queued, in_progress)."""
        return self._snapshot(status)

    def opened(self) -> list[StreamEvent]:
        if self._opened:
            return []
        self._opened = True
        return [ResponseEvent(type="response.created", sequence_number=self._n(),
                              response=self._snapshot("in_progress")),
                ResponseEvent(type="response.in_progress", sequence_number=self._n(),
                              response=self._snapshot("in_progress"))]

    def feed(self, chunk: chat_answers.ChatCompletionChunk, signature: str | None = None) -> list[StreamEvent]:
        """`signature`: the provider's own opaque signature of the reasoning streamed so far, if any."""
        self._model = chunk.model or self._model
        if isinstance(chunk.service_tier, str):
            self._service_tier = chunk.service_tier
        events: list[StreamEvent] = []
        if signature and signature != self._own:  # given with the reasoning's item, or alone before the answer
            self._own, self._own_unsaid = signature, True
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # a Responses request asks for one choice
            delta = choice.delta
            if self._call.compacting:  # the summary is answered whole, sealed, once complete
                if isinstance(delta.content, str):
                    self._compacted.append(delta.content)
                self._finish = choice.finish_reason or self._finish
                continue
            if isinstance(delta.reasoning_content, str) and delta.reasoning_content:
                events += self._think(delta.reasoning_content)
            if isinstance(delta.content, str) and delta.content:
                logprobs = choice.logprobs.content if choice.logprobs is not None else None
                events += self._text(delta.content, logprobs or [])
            if isinstance(delta.refusal, str) and delta.refusal:
                events += self._refusal(delta.refusal)
            if isinstance(delta.tool_calls, list):
                for call in delta.tool_calls:
                    events += self._tool_delta(call)
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
        return events

    # --- the reasoning item

    def _think(self, text: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        item = self._reasoning
        if item is None:
            events += self._close_message("completed") + self._close_calls()
            item = self._reasoning = ReasoningItemOut(id=f"rs_{self._rid}_{len(self.output)}", summary=[],
                                                      content=[])
            self.output.append(item)
            events.append(ItemEvent(type="response.output_item.added", sequence_number=self._n(),
                                    output_index=len(self.output) - 1, item=_copy(item)))
            if self._call.summary:
                events.append(SummaryPartEvent(type="response.reasoning_summary_part.added",
                                               sequence_number=self._n(), item_id=item.id,
                                               output_index=len(self.output) - 1, summary_index=0,
                                               part=SummaryTextOut(text="")))
        self._thought += text
        where = self.output.index(item)
        if text and self._call.summary:
            events.append(ReasoningDeltaEvent(type="response.reasoning_summary_text.delta", sequence_number=self._n(),
                                              item_id=item.id, output_index=where, summary_index=0, delta=text))
        elif text:
            events.append(ReasoningDeltaEvent(type="response.reasoning_text.delta", sequence_number=self._n(),
                                              item_id=item.id, output_index=where, content_index=0, delta=text))
        return events

    def _close_reasoning(self) -> list[StreamEvent]:
        opened: list[StreamEvent] = []
        if self._reasoning is None and self._own_unsaid and not self._call.compacting:
            opened = self._think("")  # a provider's sealed reasoning with no text: its item all the same
        item, self._reasoning = self._reasoning, None
        if item is None:
            return []
        self._own_unsaid = False
        text, self._thought = self._thought, ""
        where = self.output.index(item)
        final = reasoning_item(self._call, item.id, text, self._seal, self._own)
        self.output[where] = final
        events: list[StreamEvent] = []
        if self._call.summary:
            events += [ReasoningDoneEvent(type="response.reasoning_summary_text.done", sequence_number=self._n(),
                                          item_id=item.id, output_index=where, summary_index=0, text=text),
                       SummaryPartEvent(type="response.reasoning_summary_part.done", sequence_number=self._n(),
                                        item_id=item.id, output_index=where, summary_index=0,
                                        part=SummaryTextOut(text=text))]
        else:
            events.append(ReasoningDoneEvent(type="response.reasoning_text.done", sequence_number=self._n(),
                                             item_id=item.id, output_index=where, content_index=0, text=text))
        events.append(ItemEvent(type="response.output_item.done", sequence_number=self._n(), output_index=where,
                                item=_copy(final)))
        return opened + events

    # --- the message item and its parts

    def _open_part(self, part: OutputTextOut | RefusalOut) -> list[StreamEvent]:
        events = self._close_reasoning() + self._close_calls()
        if self._message is None:
            self._message = MessageOut(id=f"msg_{self._rid}_{len(self.output)}", status="in_progress", content=[])
            self.output.append(self._message)
            events.append(ItemEvent(type="response.output_item.added", sequence_number=self._n(),
                                    output_index=len(self.output) - 1, item=_copy(self._message)))
        else:
            events += self._close_part()
        self._message.content.append(part)
        self._part = part
        events.append(PartEvent(type="response.content_part.added", sequence_number=self._n(),
                                item_id=self._message.id, output_index=len(self.output) - 1,
                                content_index=len(self._message.content) - 1, part=_copy(part)))
        return events

    def _where(self) -> dict[str, Any]:
        assert self._message is not None
        return {"item_id": self._message.id, "output_index": self.output.index(self._message),
                "content_index": len(self._message.content) - 1}

    def _text(self, text: str, logprobs: list[chat_answers.TokenLogprobOut]) -> list[StreamEvent]:
        events = [] if isinstance(self._part, OutputTextOut) else self._open_part(
            OutputTextOut(text="", annotations=[]))
        part = self._part
        assert isinstance(part, OutputTextOut)
        part.text += text
        deltas = [_delta_logprob(t) for t in logprobs] if self._call.logprobs else []
        if self._call.logprobs:
            part.logprobs += logprobs
        self._part_logprobs += deltas
        events.append(TextDeltaEvent(sequence_number=self._n(), delta=text, logprobs=deltas, **self._where()))
        return events

    def _refusal(self, text: str) -> list[StreamEvent]:
        events = [] if isinstance(self._part, RefusalOut) else self._open_part(RefusalOut(refusal=""))
        assert isinstance(self._part, RefusalOut)
        self._part.refusal += text
        events.append(RefusalDeltaEvent(sequence_number=self._n(), delta=text, **self._where()))
        return events

    def _close_part(self) -> list[StreamEvent]:
        part, self._part = self._part, None
        if part is None:
            return []
        where = self._where()
        done: StreamEvent
        if isinstance(part, OutputTextOut):
            logprobs, self._part_logprobs = self._part_logprobs, []
            done = TextDoneEvent(sequence_number=self._n(), text=part.text, logprobs=logprobs, **where)
        else:
            done = RefusalDoneEvent(sequence_number=self._n(), refusal=part.refusal, **where)
        return [done, PartEvent(type="response.content_part.done", sequence_number=self._n(), part=_copy(part),
                                **where)]

    def _close_message(self, status: Status) -> list[StreamEvent]:
        message = self._message
        if message is None:
            return []
        events = self._close_part()
        self._message = None
        message.status = status
        events.append(ItemEvent(type="response.output_item.done", sequence_number=self._n(),
                                output_index=self.output.index(message), item=_copy(message)))
        return events

    # --- tool call items

    def _tool_delta(self, delta: chat_answers.ToolCallDeltaOut) -> list[StreamEvent]:
        events = self._close_reasoning() + self._close_message("completed")
        item = self._calls.get(delta.index)
        function = (delta.function if isinstance(delta.function, chat_answers.FunctionDeltaOut)
                    else chat_answers.FunctionDeltaOut())
        name = function.name if isinstance(function.name, str) else ""
        if item is None:
            n = len(self.output)
            call_id = delta.id if isinstance(delta.id, str) else f"call_{self._rid}_{delta.index}"
            if delta.type == "custom":
                item = CustomToolCallOut(id=f"ctc_{self._rid}_{n}", call_id=call_id, name=name, input="")
            else:
                item = FunctionCallOut(id=f"fc_{self._rid}_{n}", call_id=call_id, name=name, arguments="",
                                       status="in_progress")
            self._names[delta.index] = name
            named(self._call, item)
            self._calls[delta.index] = item
            self.output.append(item)
            events.append(ItemEvent(type="response.output_item.added", sequence_number=self._n(),
                                    output_index=n, item=_copy(item)))
        elif name:  # a name in pieces: named anew from the flat name so far
            self._names[delta.index] += name
            item.name, item.namespace = self._names[delta.index], UNSET
            named(self._call, item)
        arguments = function.arguments if isinstance(function.arguments, str) else ""
        if arguments:
            if isinstance(item, CustomToolCallOut):
                item.input += arguments
                kind = "response.custom_tool_call_input.delta"
            else:
                item.arguments += arguments
                kind = "response.function_call_arguments.delta"
            events.append(ArgumentsDeltaEvent(type=kind, sequence_number=self._n(), item_id=item.id,
                                              output_index=self.output.index(item), delta=arguments))
        return events

    def _close_calls(self, status: Status = "completed") -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for item in self._calls.values():
            index = self.output.index(item)
            if isinstance(item, CustomToolCallOut):
                events.append(CustomInputDoneEvent(sequence_number=self._n(), item_id=item.id, output_index=index,
                                                   input=item.input))
            else:
                item.status = status
                events.append(ArgumentsDoneEvent(sequence_number=self._n(), item_id=item.id, output_index=index,
                                                 name=item.name, arguments=item.arguments))
            events.append(ItemEvent(type="response.output_item.done", sequence_number=self._n(),
                                    output_index=index, item=_copy(item)))
        self._calls.clear()
        self._names.clear()
        return events

    # --- the end

    def completed(self, usage: wire_types.Usage | None) -> list[StreamEvent]:
        """The stream is complete: every open item is closed; then response.completed (or .incomplete)."""
        events = self.closed()
        return [*events, self.completion(self.final(usage))]

    def closed(self) -> list[StreamEvent]:
        """The stream is complete: every open item closed (response.completed is `completion`'s, once the
        final response, `final`, is kept where it is stored)."""
        status: Status = "incomplete" if self._finish in INCOMPLETE else "completed"
        events = self._close_reasoning() + self._close_message(status) + self._close_calls(status)
        if self._call.compacting:
            item = compaction_item(self._rid, "".join(self._compacted), self._seal)
            self.output.append(item)
            events += [ItemEvent(type=kind, sequence_number=self._n(), output_index=len(self.output) - 1,
                                 item=_copy(item))
                       for kind in ("response.output_item.added", "response.output_item.done")]
        elif not self.output:  # an empty answer is still one message with one (empty) text
            events += self._open_part(OutputTextOut(text="", annotations=[]))
            events += self._close_message(status)
        return events

    def final(self, usage: wire_types.Usage | None) -> ResponseObject:
        """The whole response, once `closed`: what response.completed carries, and what a store keeps."""
        return self._snapshot("completed", usage=usage_out(usage))

    def completion(self, final: ResponseObject) -> StreamEvent:
        """The stream's last event: response.completed (or .incomplete) with the final response."""
        self.ended = True
        kind = "response.incomplete" if final.status == "incomplete" else "response.completed"
        return ResponseEvent(type=kind, sequence_number=self._n(), response=final)

    def failed(self, error: IngressError) -> list[StreamEvent]:
        """The stream broke after it began: `error`, then response.failed with what was answered so far."""
        if self.ended:
            return []
        opening = self.opened()  # a stream that failed while only heartbeats had been sent
        self.ended = True
        code = error.code or error.type
        snapshot = self._snapshot("failed", error=ErrorOut(code=code, message=error.message))
        return [*opening, ErrorEvent(sequence_number=self._n(), code=code, message=error.message, param=error.param),
                ResponseEvent(type="response.failed", sequence_number=self._n(), response=snapshot)]


def _copy(item: T) -> T:
    """An event's own copy of an item or part: the stream state goes on changing the original (the
    events of one chunk are all made before the first is written). Only at item and part boundaries."""
    return deepcopy(item)
