"""The streaming core (sans-I/O): a streamed answer's body in, read by read however its bytes were split;
the client's chunks out, each read's together, and the failure that came after them.

    body = StreamBody(StreamTranslator(...), max_frame)
    read = body.feed(data)    # Read(chunks=[...], error=None): the frames completed by `data`, translated
    read = body.end()         # at the end of the body: Read([], error) when it was cut short

One object, called the same way from the upstream connection's callback and from the stream's task
(`ingress/pipeline/stream.py`). Which chunks come out is the translator's: OpenAI chat chunks (and, for a
token's content, a `Delta` the edge writes from a template), legacy text completions, or another dialect's
events; each translator reads one whole frame at a time (`FrameTranslator`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

from ingress.errors import IngressError, UpstreamProtocolError
from ingress.wire import types as wire_types
from ingress.wire.framing import FrameDecoder, FrameError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class FrameTranslator(Protocol[T_co]):
    """Frames → one dialect's chunks, per request: `read_frame` takes one whole frame (size prefix
    included) and raises a service's Error frame or a broken sequence as an IngressError."""

    @property
    def done(self) -> bool:
        """The final frame has been read."""
        ...

    @property
    def usage(self) -> wire_types.Usage | None:
        """The service's usage, once it came."""
        ...

    @property
    def output(self) -> list[str]:
        """What was streamed (text, reasoning, tool arguments): counted when no usage comes."""
        ...

    @property
    def served_model(self) -> str | None:
        """The model the service named, on the first chunk that named one (None until then)."""
        ...

    @property
    def id(self) -> str:
        """The answer's id, as the client is told it."""
        ...

    @property
    def finish_reasons(self) -> list[str]:
        """Why each choice ended, in the contract's words, as the final chunks said (a request's span has them)."""
        ...

    def read_frame(self, frame: bytes) -> Sequence[T_co]: ...

    def finish(self) -> None:
        """At the end of the body: an UpstreamProtocolError unless the final frame was read."""
        ...


def next_in_order(done: bool, expected: int, chunk: wire_types.Chunk) -> int:
    """The number of the frame after `chunk`, which must come before the stream's end and be the one
    `expected`: a service's stream that goes on after its final frame, or skips one, is broken."""
    if done:
        raise UpstreamProtocolError("The model service sent data after the end of the stream.")
    if chunk.sequence != expected:
        raise UpstreamProtocolError(
            f"The model service stream skipped frames (expected {expected}, got {chunk.sequence}).")
    return expected + 1


class Read(NamedTuple, Generic[T]):
    """What one read of the body became: its chunks, and the error that came after them in it (or None)."""

    chunks: list[T]
    error: Exception | None  # the core's are IngressErrors; a caller may carry its own bug here


class StreamBody(Generic[T]):
    """A streamed answer's body, read by read: frames cut, each translated; nothing after the final frame
    is read, however it arrived."""

    __slots__ = ("_frames", "_sent", "translator")

    def __init__(self, translator: FrameTranslator[T], max_frame: int,
                 sent: Callable[[int], None] | None = None) -> None:
        """`sent(n)`: told as each frame's n chunks are made (n > 0), for the gaps between chunks."""
        self.translator = translator
        self._frames = FrameDecoder(max_frame)
        self._sent = sent

    @property
    def done(self) -> bool:
        return self.translator.done

    def feed(self, data: bytes) -> Read[T]:
        """One read's chunks; a failure in it (a malformed frame, the service's Error frame, a broken
        sequence) after the chunks of the frames before it."""
        translator, sent = self.translator, self._sent
        chunks: list[T] = []
        try:
            for frame in self._frames.feed(data):
                made = translator.read_frame(frame)
                if made:
                    chunks += made
                    if sent is not None:
                        sent(len(made))
                if translator.done:
                    break
        except FrameError as malformed:  # one name an except clause: a compiled build types each
            return Read(chunks, _malformed(malformed))
        except IngressError as exc:
            return Read(chunks, exc)
        return Read(chunks, None)

    def end(self) -> Read[T]:
        """At the end of the body: its error if it ended before the final frame (or inside a frame)."""
        try:
            self._frames.finish()
            self.translator.finish()
        except FrameError as malformed:
            return Read([], _malformed(malformed))
        except IngressError as exc:
            return Read([], exc)
        return Read([], None)


def _malformed(exc: FrameError) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"The model service sent a malformed stream: {exc}.")
