"""Translate the answer to a Responses request into OpenAI's `response` object (sans-I/O), and the output
items the stream's events build too (responses_events.py).

A Responses request travels as a chat request (`ingress.oai.responses_to_chat.as_chat`), so its answer is a
CompletionResponse, or CompletionChunk frames that StreamTranslator has already checked and made into
chat chunks: here they become output items. A choice's text and refusal are one `message` item; each
tool call is a `function_call` (or `custom_tool_call`) item; its reasoning, a `reasoning` item before them
(the text as `content`, as the summary when one was asked, and sealed by `seal` when `include` asks for
`reasoning.encrypted_content`). A compaction's answer is one `compaction` item: the text, sealed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec import UNSET

from ingress.oai.responses import Call
from ingress.oai.responses_answers import (
    TEXT,
    CompactionOut,
    ConversationRef,
    CustomToolCallOut,
    ErrorOut,
    FunctionCallOut,
    IncompleteDetails,
    InputTokensDetails,
    MessageOut,
    OutputItem,
    OutputTextOut,
    OutputTokensDetails,
    ReasoningItemOut,
    ReasoningOut,
    ReasoningTextOut,
    RefusalOut,
    ResponseObject,
    SummaryTextOut,
    UrlCitationOut,
    UsageOut,
)
from ingress.oai.sealing import Kind
from ingress.translate.completion import translate_finish, translate_token
from ingress.wire import types as wire_types

# Seal(kind, text, own): what the client gets to send back: the text sealed by the edge (ingress/oai/sealing.py),
# naming the route that served; or `own`, the provider's own opaque blob, on a route that gives it back to it.
Seal = Callable[[Kind, str, str | None], str]
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_out(u: wire_types.Usage | None) -> UsageOut | None:
    if u is None:
        return None
    return UsageOut(
        input_tokens=u.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=u.cached_tokens,
                                                cache_write_tokens=u.cache_write_tokens),
        output_tokens=u.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=u.reasoning_tokens),
        total_tokens=u.total_tokens or u.prompt_tokens + u.completion_tokens,
    )


def _citation(a: wire_types.Annotation) -> UrlCitationOut:
    return UrlCitationOut(start_index=a.start_index, end_index=a.end_index, title=a.title or "", url=a.url or "")


def response_object(call: Call, *, id: str, created_at: int, model: str, status: Any, output: list[OutputItem],
                    usage: UsageOut | None = None, finish_reason: str | None = None,
                    error: ErrorOut | None = None, service_tier: str | None = None) -> ResponseObject:
    """The response object: the answer's output and usage, and the request's settings echoed."""
    r = call.request
    reason = INCOMPLETE.get(finish_reason or "")
    return ResponseObject(
        id=id, created_at=created_at, status="incomplete" if reason and status == "completed" else status,
        error=error, incomplete_details=IncompleteDetails(reason=reason) if reason else None,  # type: ignore[arg-type]  # INCOMPLETE's values are the Literal's
        instructions=r.instructions, max_output_tokens=r.max_output_tokens, model=model, output=output,
        parallel_tool_calls=r.parallel_tool_calls if r.parallel_tool_calls is not None else True,
        reasoning=ReasoningOut(effort=r.reasoning.effort if r.reasoning is not None else None,
                               summary=call.summary),
        temperature=r.temperature, text=r.text or TEXT, tool_choice=r.tool_choice or "auto", tools=call.tools,
        top_p=r.top_p, usage=usage, user=r.user, metadata=r.metadata or {}, max_tool_calls=r.max_tool_calls,
        top_logprobs=r.top_logprobs, service_tier=service_tier or r.service_tier,
        previous_response_id=r.previous_response_id, store=call.kept, background=bool(r.background),
        conversation=UNSET if call.conversation is None else ConversationRef(id=call.conversation),
    )


def named(call: Call, item: FunctionCallOut | CustomToolCallOut) -> None:
    """A call of a namespaced tool, which the model knew by its flat name, named as the client offered it."""
    namespaced = call.namespaced.get(item.name)
    if namespaced is not None:
        item.namespace, item.name = namespaced


def _call_item(call: Call, i: int, request_id: str, c: wire_types.FunctionCall) -> OutputItem:
    item: FunctionCallOut | CustomToolCallOut
    if c.type == "custom":
        item = CustomToolCallOut(id=f"ctc_{request_id}_{i}", call_id=c.id, name=c.name, input=c.arguments)
    else:
        item = FunctionCallOut(id=f"fc_{request_id}_{i}", call_id=c.id, name=c.name, arguments=c.arguments,
                               status="completed")
    named(call, item)
    return item


def reasoning_item(call: Call, item_id: str, text: str, seal: Seal | None,
                    own: str | None = None) -> ReasoningItemOut:
    item = ReasoningItemOut(id=item_id, summary=[SummaryTextOut(text=text)] if call.summary else [],
                            content=[ReasoningTextOut(text=text)])
    if call.sealed_reasoning and seal is not None:
        item.encrypted_content = seal("reasoning", text, own)
    return item


def compaction_item(request_id: str, text: str, seal: Seal | None) -> CompactionOut:
    assert seal is not None  # a compaction is answered only where the edge seals
    return CompactionOut(id=f"cmp_{request_id}", encrypted_content=seal("compaction", text, None))


def translate_response_object(call: Call, r: wire_types.Response, *, request_id: str,
                              seal: Seal | None = None) -> ResponseObject:
    """A whole answer: its first choice (a Responses request asks for one) as output items."""
    choice = r.choices[0] if r.choices else wire_types.Choice()
    finish = translate_finish(choice.finish_reason)
    item_status = "incomplete" if finish in INCOMPLETE else "completed"
    output: list[OutputItem] = []
    if call.compacting:
        return response_object(call, id=f"resp_{request_id}", created_at=r.created, model=r.model,
                               status="completed", output=[compaction_item(request_id, choice.content or "", seal)],
                               usage=usage_out(r.usage), finish_reason=finish, service_tier=r.service_tier)
    if choice.reasoning or choice.signature:
        output.append(reasoning_item(call, f"rs_{request_id}", choice.reasoning or "", seal, choice.signature))
    if choice.content or choice.refusal is not None or not choice.tool_calls:
        parts: list[OutputTextOut | RefusalOut] = []
        if choice.content is not None or choice.refusal is None:
            logprobs = [translate_token(t) for t in choice.logprobs or ()] if call.logprobs else []
            parts.append(OutputTextOut(text=choice.content or "", logprobs=logprobs,
                                       annotations=[_citation(a) for a in choice.annotations]))
        if choice.refusal is not None:
            parts.append(RefusalOut(refusal=choice.refusal))
        output.append(MessageOut(id=f"msg_{request_id}", status=item_status, content=parts))  # type: ignore[arg-type]  # "completed" or "incomplete"
    output += [_call_item(call, i, request_id, c) for i, c in enumerate(choice.tool_calls)]
    return response_object(call, id=f"resp_{request_id}", created_at=r.created, model=r.model, status="completed",
                           output=output, usage=usage_out(r.usage), finish_reason=finish,
                           service_tier=r.service_tier)
