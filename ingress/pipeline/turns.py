"""turns: a chat request's late system and developer messages folded into user turns, for engines that refuse them.

Agents send instructions mid-conversation (Claude Code's `[system, user, system]`), and many engines' chat
templates raise on a system message that is not first (Qwen's, Llama-3's: "System message must be at the
beginning"). On a route that folds them (`late_system = "fold"`, the default of `self_hosted` routes), each
system or developer message after the conversation's first other message travels as user text, wrapped in
its role's tag (`<system>\\n...\\n</system>`) so its origin stays visible to the model: joined to the user
message right before it, else to the one right after it (so roles still alternate for templates that insist
on it), else a user message of its own; one that falls between a tool call and its results waits until
after them. The leading system and developer messages stay where they are.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ingress.oai.chat import (
    ChatCompletionRequest,
    DeveloperMessage,
    FunctionMessage,
    Message,
    PromptCacheBreakpoint,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
    UserPart,
)
from ingress.settings import Route

FOLDED = "messages.late_system_folded"  # the hint the access line names (routed.hints) when a request was folded

_Instruction = SystemMessage | DeveloperMessage
_Content = str | list[UserPart]


def late_system(route: Route) -> Literal["fold", "keep"]:
    """The route's setting, its default resolved: engines served by our own bridges ("self_hosted") fold."""
    if route.late_system is not None:
        return route.late_system
    return "fold" if route.provider == "self_hosted" else "keep"


def fold_late_system(request: ChatCompletionRequest) -> tuple[ChatCompletionRequest, bool]:
    """`request` with its late system and developer messages folded into user turns, and whether any was;
    the same request, untouched, when it has none."""
    messages = request.messages
    first = next((i for i, message in enumerate(messages) if not isinstance(message, _Instruction)), len(messages))
    if not any(isinstance(message, _Instruction) for message in messages[first:]):
        return request, False
    folded: list[Message] = list(messages[:first])
    pending: list[_Content] = []  # wrapped instructions waiting for the next user message
    for message in messages[first:]:
        if isinstance(message, _Instruction):
            last = folded[-1]
            if not pending and isinstance(last, UserMessage):
                folded[-1] = _with(last, [last.content, _wrapped(message)])
            else:
                pending.append(_wrapped(message))
            continue
        if pending and not isinstance(message, ToolMessage | FunctionMessage):
            if isinstance(message, UserMessage):
                message = _with(message, [*pending, message.content])
            else:
                folded.append(UserMessage(content=_joined(pending)))
            pending = []
        folded.append(message)
    if pending:
        folded.append(UserMessage(content=_joined(pending)))
    return msgspec.structs.replace(request, messages=folded), True


def _wrapped(message: SystemMessage | DeveloperMessage) -> _Content:
    """The instruction's text inside its role's tag: a string stays one; parts keep their cache breakpoints,
    the tags joined to the first and last parts' text."""
    tag = "system" if isinstance(message, SystemMessage) else "developer"
    opening, closing = f"<{tag}>\n", f"\n</{tag}>"
    content = message.content
    if isinstance(content, str):
        return opening + content + closing
    if not content:
        return opening + closing
    texts = list(content)
    texts[0] = msgspec.structs.replace(texts[0], text=opening + texts[0].text)
    texts[-1] = msgspec.structs.replace(texts[-1], text=texts[-1].text + closing)
    parts: list[UserPart] = [*texts]
    return parts


def _with(message: UserMessage, contents: list[_Content]) -> UserMessage:
    return msgspec.structs.replace(message, content=_joined(contents))


def _joined(contents: list[_Content]) -> _Content:
    """Strings joined by a blank line; with any list of parts among them, one list of all their parts."""
    if all(isinstance(content, str) for content in contents):
        return "\n\n".join(content for content in contents if isinstance(content, str) and content)
    parts: list[UserPart] = []
    for content in contents:
        if isinstance(content, str):
            if content:
                parts.append(TextPart(text=content))
        else:
            parts += content
    return parts


# --- prompt-cache breakpoints for Anthropic ---------------------------------------------------------

_MARK = PromptCacheBreakpoint(mode="explicit")
_Marked = SystemMessage | DeveloperMessage | UserMessage | ToolMessage


def place_cache_breakpoints(request: ChatCompletionRequest) -> tuple[ChatCompletionRequest, bool]:
    """A request bound for Anthropic in another dialect, with the prompt-cache breakpoints Anthropic needs to
    cache anything (it caches only up to an explicit `cache_control`): on the leading instructions (which
    caches the tools and the system prompt), on the last message (the conversation so far, which the next
    turn extends), and on the end of the turn before the last user message (the prefix the last turn
    shares with the one before it). None where the client placed its own; whether any was placed."""
    messages = request.messages
    if any(_marked(m) for m in messages):
        return request, False
    at: list[int] = []
    leading = [i for i, m in enumerate(messages[:next((i for i, m in enumerate(messages)
                                                       if not isinstance(m, _Instruction)), len(messages))])]
    if leading:
        at.append(leading[-1])
    markable = [i for i, m in enumerate(messages) if isinstance(m, _Marked) and m.content]
    if markable and markable[-1] not in at:
        at.append(markable[-1])
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=None)
    before = [i for i in markable if last_user is not None and i < last_user and i not in leading]
    if before and before[-1] not in at:
        at.append(before[-1])
    if not at:
        return request, False
    placed = list(messages)
    for i in at:
        placed[i] = _with_mark(messages[i])  # type: ignore[arg-type]  # markable: a message with content
    return msgspec.structs.replace(request, messages=placed), True


def _marked(m: Message) -> bool:
    content = getattr(m, "content", None)
    return isinstance(content, list) and any(getattr(p, "prompt_cache_breakpoint", None) is not None
                                             for p in content)


def _with_mark(m: _Marked) -> _Marked:
    """The message with a breakpoint on its last part (a string content becomes one text part)."""
    content = m.content
    if isinstance(content, str):
        parts: list[Any] = [TextPart(text=content, prompt_cache_breakpoint=_MARK)]
    else:
        assert content
        last = content[-1]
        parts = [*content[:-1], msgspec.structs.replace(last, prompt_cache_breakpoint=_MARK)
                 if hasattr(last, "prompt_cache_breakpoint") else last]
    return msgspec.structs.replace(m, content=parts)
