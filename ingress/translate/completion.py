"""Translate a CompletionResponse (or an Error) into OpenAI's chat.completion."""

from __future__ import annotations

from msgspec import UNSET

from ingress.errors import IngressError, UpstreamAnswered, UpstreamProtocolError
from ingress.oai import responses as out
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wt


def translate_usage(u: wt.Usage) -> out.UsageOut:
    return out.UsageOut(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.total_tokens or u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=out.PromptTokensDetails(cached_tokens=u.cached_tokens),
        completion_tokens_details=out.CompletionTokensDetails(reasoning_tokens=u.reasoning_tokens),
    )


def translate_tool_call(call: wt.FunctionCall) -> out.ToolCallOut:
    return out.ToolCallOut(id=call.id, type=call.type, function=out.FunctionOut(name=call.name, arguments=call.arguments))


def translate_response(r: wt.Response) -> out.ChatCompletion:
    choices = [
        out.ChoiceOut(
            index=c.index,
            message=out.MessageOut(
                content=c.content,
                refusal=c.refusal,
                tool_calls=[translate_tool_call(t) for t in c.tool_calls] if c.tool_calls else UNSET,
            ),
            finish_reason=c.finish_reason,
        )
        for c in r.choices
    ]
    return out.ChatCompletion(
        id=r.id,
        created=r.created,
        model=r.model,
        choices=choices,
        usage=translate_usage(r.usage) if r.usage is not None else UNSET,
        system_fingerprint=r.system_fingerprint if r.system_fingerprint is not None else UNSET,
    )


def error_from_upstream(info: wt.ErrorInfo) -> UpstreamAnswered:
    return UpstreamAnswered(info.status, info.type, info.code, info.message, info.param)


def decode_answer(body: bytes, *, verify_answer: bool = True) -> wt.Response:
    """A non-streamed answer body: a CompletionResponse, or an Error raised as UpstreamAnswered."""
    kind = identifiers.identifier_of(body)
    try:
        if kind == identifiers.ERROR:
            if verify_answer:
                verify.verify_error(body)
            raise error_from_upstream(decode.decode_error(body))
        if verify_answer:
            verify.verify_response(body)
        return decode.decode_response(body)
    except IngressError:
        raise
    except Exception as exc:  # unverified, a malformed buffer can fail anywhere in the generated readers
        raise UpstreamProtocolError("The model service sent an unreadable answer.") from exc
