"""Google's embeddings, `POST /v1beta/models/{model}:embedContent` and `:batchEmbedContents`: the body read
strictly (its fields by JSON or proto name, unknown ones refused, as Google does) as the contract's embeddings
request it amounts to.

What travels: each content's text (its text parts, joined by newlines) as one input, in the requests' order,
and `outputDimensionality` as the request's dimensions. Refused, naming the field by its proto path: a part
that is not text (only text is embedded here), a content without text, a batch's request naming another model
than the URL's, and a batch whose requests ask different dimensionalities (one request of the contract serves
them all). `taskType` and `title` only Google's models read: bound for Google, the body travels as sent too
(prepare_gemini.py), so they reach them; elsewhere they are not sent, and named on the exchange (an engine
elsewhere has no task types; its vector is the same without them)."""

from __future__ import annotations

from typing import Annotated

import msgspec
import msgspec.inspect as mi
from msgspec import Meta

from ingress.errors import InvalidRequest
from ingress.gemini.contents import PART_DATA, Content, In
from ingress.gemini.contents_codec import decode_google, present, refused
from ingress.oai.embeddings import MAX_INPUTS, Dimensions, EmbeddingRequest

TASK_TYPE, TITLE = "task_type", "title"  # named as not sent


class EmbedContentRequest(In):
    """`embedContent`'s body, and each request of a batch (which names its model: `models/{model}`)."""

    content: Content
    model: str | None = None
    task_type: str | None = None  # RETRIEVAL_QUERY, RETRIEVAL_DOCUMENT, SEMANTIC_SIMILARITY...: Google's to read
    title: str | None = None  # a RETRIEVAL_DOCUMENT's title
    output_dimensionality: Dimensions | None = None


class BatchEmbedContentsRequest(In):
    requests: Annotated[list[EmbedContentRequest], Meta(min_length=1, max_length=MAX_INPUTS)]


_one = msgspec.json.Decoder(EmbedContentRequest, strict=False)
_batch = msgspec.json.Decoder(BatchEmbedContentsRequest, strict=False)
_ONE = mi.type_info(EmbedContentRequest)
_BATCH = mi.type_info(BatchEmbedContentsRequest)


def request_type(batch: bool) -> str:
    """The request's type, as Google's errors name it."""
    return "BatchEmbedContentsRequest" if batch else "EmbedContentRequest"


def read_embed(body: bytes, model: str, *, batch: bool) -> tuple[EmbeddingRequest, dict[str, str]]:
    """The embeddings request a body of `embedContent` (`batch`: `batchEmbedContents`) of the URL's `model`
    amounts to, and what it asked that is not sent: each name, and where it was first asked
    (`{"task_type": "requests[1].task_type"}`); InvalidRequest for what is refused."""
    message = request_type(batch)
    requests = decode_google(body, _batch, _BATCH, message).requests if batch else [
        decode_google(body, _one, _ONE, message)]

    def place(i: int) -> str:  # a request's fields, as Google's errors name them (made for a refusal alone)
        return f"requests[{i}]." if batch else ""

    inputs: list[str | int | list[int]] = []
    asked = requests[0].output_dimensionality
    dropped: dict[str, str] = {}
    for i, request in enumerate(requests):
        if request.model is not None and request.model.removeprefix("models/") != model:
            raise refused(f"* {message}.{place(i)}model: it names {request.model[:200]!r}, and the URL "
                          f"models/{model[:200]}; they must be the same model.", f"{place(i)}model")
        text = _text(request.content)
        if text is None:
            raise _not_text(request.content, f"{place(i)}content", message)
        inputs.append(text)
        if request.output_dimensionality != asked:
            raise refused(f"* {message}.{place(i)}output_dimensionality: every request of a batch must ask the "
                          "same output_dimensionality here (one embeddings request serves them all).",
                          f"{place(i)}output_dimensionality")
        if request.task_type is not None and TASK_TYPE not in dropped:
            dropped[TASK_TYPE] = f"{place(i)}{TASK_TYPE}"
        if request.title is not None and TITLE not in dropped:
            dropped[TITLE] = f"{place(i)}{TITLE}"
    return EmbeddingRequest(model=model, input=inputs, dimensions=asked), dict(sorted(dropped.items()))


def _text(content: Content) -> str | None:
    """A content's text: its parts, each text alone, joined by newlines; None when a part is anything else,
    when there is none, or no text to embed (_not_text says which)."""
    texts: list[str] = []
    for part in content.parts:
        text = part.text
        if text is None or part.inline_data is not None or part.file_data is not None or (
                part.function_call is not None or part.function_response is not None or len(part.executable_code)
                or len(part.code_execution_result) or len(part.tool_call) or len(part.tool_response)):
            return None
        texts.append(text)
    return "\n".join(texts) or None


def _not_text(content: Content, where: str, message: str) -> InvalidRequest:
    """The refusal of a content _text found no text in, naming the part (or the parts) at fault."""
    for j, part in enumerate(content.parts):
        kinds = [name for name in PART_DATA if present(getattr(part, name))]
        if kinds != ["text"]:
            field = f"{where}.parts[{j}].{kinds[0] if kinds else 'data'}"
            return refused(f"* {message}.{field}: only text is embedded here.", field)
    if not content.parts:
        return refused(f"* {message}.{where}.parts: contents.parts must not be empty.", f"{where}.parts")
    return refused(f"* {message}.{where}.parts: the content has no text to embed.", f"{where}.parts")
