"""Google's embeddings, `POST /v1beta/models/{model}:embedContent` and `:batchEmbedContents`: the body read
strictly (its fields by JSON or proto name, unknown ones refused, as Google does) as the contract's embeddings
request it amounts to.

What travels: each content's text (its text parts, joined by newlines) as one input, in the requests' order,
and `outputDimensionality` as the request's dimensions. Refused, naming the field by its proto path: a part
that is not text (only text is embedded here), a content without text, a batch's request naming another model
than the URL's, and a batch whose requests ask different dimensionalities (one request of the contract serves
them all). Not sent, and named on the exchange: `taskType` and `title`, which only Google's models read (an
engine elsewhere has no task types; its vector is the same without them). The contract does not carry them, so
on a route to Google, where they would change the vectors, prepare refuses them (prepare_gemini.py)."""

from __future__ import annotations

from typing import Annotated

import msgspec
import msgspec.inspect as mi
from msgspec import Meta

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


def read_embed(body: bytes, model: str, *, batch: bool) -> tuple[EmbeddingRequest, dict[str, str]]:
    """The embeddings request a body of `embedContent` (`batch`: `batchEmbedContents`) of the URL's `model`
    amounts to, and what it asked that is not sent: each name, and where it was first asked
    (`{"task_type": "requests[1].task_type"}`); InvalidRequest for what is refused."""
    if batch:
        message = "BatchEmbedContentsRequest"
        requests = decode_google(body, _batch, _BATCH, message).requests
        places = [f"requests[{i}]." for i in range(len(requests))]
    else:
        message = "EmbedContentRequest"
        requests = [decode_google(body, _one, _ONE, message)]
        places = [""]
    inputs: list[str | int | list[int]] = []
    for request, place in zip(requests, places, strict=True):
        if request.model is not None and request.model.removeprefix("models/") != model:
            raise refused(f"* {message}.{place}model: it names {request.model[:200]!r}, and the URL "
                          f"models/{model[:200]}; they must be the same model.", f"{place}model")
        inputs.append(_text(request.content, f"{place}content", message))
    asked = requests[0].output_dimensionality
    for request, place in zip(requests, places, strict=True):
        if request.output_dimensionality != asked:
            raise refused(f"* {message}.{place}output_dimensionality: every request of a batch must ask the same "
                          "output_dimensionality here (one embeddings request serves them all).",
                          f"{place}output_dimensionality")
    dropped = {name: next(f"{place}{name}" for r, place in zip(requests, places, strict=True)
                          if getattr(r, name) is not None)
               for name in (TASK_TYPE, TITLE) if any(getattr(r, name) is not None for r in requests)}
    return EmbeddingRequest(model=model, input=inputs, dimensions=asked), dropped


def _text(content: Content, where: str, message: str) -> str:
    """A content's text: its parts, each text, joined by newlines; refused when a part is anything else, or
    when there is no text to embed."""
    if not content.parts:
        raise refused(f"* {message}.{where}.parts: contents.parts must not be empty.", f"{where}.parts")
    texts: list[str] = []
    for j, part in enumerate(content.parts):
        kinds = [name for name in PART_DATA if present(getattr(part, name))]
        if kinds != ["text"] or part.text is None:
            field = f"{where}.parts[{j}].{kinds[0] if kinds else 'data'}"
            raise refused(f"* {message}.{field}: only text is embedded here.", field)
        texts.append(part.text)
    text = "\n".join(texts)
    if not text:
        raise refused(f"* {message}.{where}.parts: the content has no text to embed.", f"{where}.parts")
    return text
