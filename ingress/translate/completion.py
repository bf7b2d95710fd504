"""Translate a decoded CompletionResponse into OpenAI's chat.completion (sans-I/O).

Verifying and decoding the answer, and raising its Error, is wire work: `ingress.wire.answer`.
"""

from __future__ import annotations

from msgspec import UNSET

from ingress.oai import responses as out
from ingress.wire import types as wt
from ingress.wire.answer import decode_answer as decode_answer  # moved to wire/; pipeline.py imports it here


def translate_usage(u: wt.Usage) -> out.UsageOut:
    return out.UsageOut(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.total_tokens or u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=out.PromptTokensDetails(cached_tokens=u.cached_tokens),
        completion_tokens_details=out.CompletionTokensDetails(reasoning_tokens=u.reasoning_tokens),
    )


def translate_tool_call(call: wt.FunctionCall) -> out.ToolCallOut:
    function = out.FunctionOut(name=call.name, arguments=call.arguments)
    return out.ToolCallOut(id=call.id, type=call.type, function=function)


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
