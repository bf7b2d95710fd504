"""Translate a decoded CompletionResponse into OpenAI's chat.completion (sans-I/O).

Verifying and decoding the answer, and raising its Error, is wire work: `ingress.wire.answer`.
"""

from __future__ import annotations

from msgspec import UNSET

from ingress.oai import chat_answers
from ingress.wire import types as wire_types
from ingress.wire.decode import shortest_float32


def translate_usage(u: wire_types.Usage) -> chat_answers.UsageOut:
    """The counts OpenAI's chat answers always carry, zeros included; the newer details (cache writes,
    image and text tokens) only when the service counted them: 0 on the wire is "not counted"."""
    return chat_answers.UsageOut(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.total_tokens or u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=chat_answers.PromptTokensDetails(
            cached_tokens=u.cached_tokens, audio_tokens=u.prompt_audio_tokens,
            cache_write_tokens=u.cache_write_tokens or UNSET, image_tokens=u.prompt_image_tokens or UNSET,
            text_tokens=u.prompt_text_tokens or UNSET),
        completion_tokens_details=chat_answers.CompletionTokensDetails(
            reasoning_tokens=u.reasoning_tokens, audio_tokens=u.completion_audio_tokens,
            accepted_prediction_tokens=u.accepted_prediction_tokens,
            rejected_prediction_tokens=u.rejected_prediction_tokens,
            text_tokens=u.completion_text_tokens or UNSET),
    )


# A logprob travels as a float32: written back as the shortest decimal that reads as the same float32
# (-0.1, not -0.10000000149011612).


def _top(t: wire_types.TopLogprob) -> chat_answers.TopLogprobOut:
    return chat_answers.TopLogprobOut(token=t.token or "", logprob=shortest_float32(t.logprob), bytes=t.bytes)


def translate_token(t: wire_types.TokenLogprob) -> chat_answers.TokenLogprobOut:
    return chat_answers.TokenLogprobOut(token=t.token or "", logprob=shortest_float32(t.logprob), bytes=t.bytes,
                                        top_logprobs=[_top(x) for x in t.top_logprobs] if t.top_logprobs else [])


def translate_logprobs(content: list[wire_types.TokenLogprob] | None,
                       refusal: list[wire_types.TokenLogprob] | None) -> chat_answers.LogprobsOut | None:
    """A choice's `logprobs`: null when the service sent none (none were asked for)."""
    if content is None and refusal is None:
        return None
    return chat_answers.LogprobsOut(content=None if content is None else [translate_token(t) for t in content],
                                    refusal=None if refusal is None else [translate_token(t) for t in refusal])


def _annotation(a: wire_types.Annotation) -> chat_answers.AnnotationOut:
    citation = chat_answers.UrlCitationOut(start_index=a.start_index, end_index=a.end_index, title=a.title or "",
                                           url=a.url or "")
    return chat_answers.AnnotationOut(type=a.type or "url_citation", url_citation=citation)


def translate_tool_call(call: wire_types.FunctionCall) -> chat_answers.ToolCallOut:
    if call.type == "custom":  # a custom tool's call: its arguments are the tool's free-form input
        custom = chat_answers.CustomCallOut(name=call.name, input=call.arguments)
        return chat_answers.ToolCallOut(id=call.id, type="custom", custom=custom)
    function = chat_answers.FunctionOut(name=call.name, arguments=call.arguments)
    return chat_answers.ToolCallOut(id=call.id, type=call.type, function=function)


LEGACY_FINISH = {"tool_calls": "function_call"}  # a legacy `functions` request's finish_reason
# The contract's finish reasons OpenAI has no name for, as the nearest it has: a refusal is what its
# content filter reports; a paused turn (Anthropic's `pause_turn`) ended this answer as a stop does, the
# client going on with a new request.
OPENAI_FINISH = {"refusal": "content_filter", "pause_turn": "stop"}


def _message(c: wire_types.Choice, legacy_functions: bool) -> chat_answers.MessageOut:
    message = _message_of(c, legacy_functions)
    if c.reasoning is not None:
        message.reasoning_content = c.reasoning
    return message


def _message_of(c: wire_types.Choice, legacy_functions: bool) -> chat_answers.MessageOut:
    annotations = [_annotation(a) for a in c.annotations] if c.annotations else UNSET
    if legacy_functions and c.tool_calls:
        # The legacy shape holds one call: a service that made more than one answered a request that
        # allows one (OpenAI never does); the first is the answer.
        first = c.tool_calls[0]
        call = chat_answers.FunctionOut(name=first.name, arguments=first.arguments)
        return chat_answers.MessageOut(content=c.content, refusal=c.refusal, annotations=annotations,
                                       function_call=call)
    return chat_answers.MessageOut(content=c.content, refusal=c.refusal, annotations=annotations,
                                   tool_calls=[translate_tool_call(t) for t in c.tool_calls] if c.tool_calls else UNSET)


def translate_finish(reason: str | None, legacy_functions: bool = False) -> str | None:
    """A finish reason of the contract as OpenAI names it."""
    if reason is None:
        return None
    reason = OPENAI_FINISH.get(reason, reason)
    return LEGACY_FINISH.get(reason, reason) if legacy_functions else reason


def translate_response(r: wire_types.Response, *, legacy_functions: bool = False) -> chat_answers.ChatCompletion:
    """`legacy_functions`: the request used `functions`; a tool call is answered as `function_call`."""
    choices = [
        chat_answers.ChoiceOut(index=c.index, message=_message(c, legacy_functions),
                               finish_reason=translate_finish(c.finish_reason, legacy_functions),
                               logprobs=translate_logprobs(c.logprobs, c.refusal_logprobs))
        for c in r.choices
    ]
    return chat_answers.ChatCompletion(
        id=r.id,
        created=r.created,
        model=r.model,
        choices=choices,
        usage=translate_usage(r.usage) if r.usage is not None else UNSET,
        system_fingerprint=r.system_fingerprint if r.system_fingerprint is not None else UNSET,
        service_tier=r.service_tier if r.service_tier is not None else UNSET,
    )
