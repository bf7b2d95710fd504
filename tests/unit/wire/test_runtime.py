"""The generated encoders' runtime: where it puts a vector's length and elements."""

from __future__ import annotations

import pytest

from ingress import wire
from ingress.wire import runtime, verify


@pytest.mark.parametrize("elem_align", [1, 2, 4, 8])
@pytest.mark.parametrize("used", range(8))
def test_a_vector_length_is_4_aligned_and_its_elements_elem_aligned(used: int, elem_align: int) -> None:
    buf = bytearray(used)
    at = runtime.vector_start(buf, 3, elem_align)
    assert at % 4 == 0  # the length is a uint32, whatever the elements are
    assert (at + 4) % elem_align == 0
    assert len(buf) == at + 4 and buf[at:] == b"\x03\x00\x00\x00"


def test_byte_vectors_after_odd_lengths_verify() -> None:
    """A [ubyte] vector after a string of any length (TokenLogprob.bytes after its token)."""
    for n in range(1, 9):
        token = "x" * n
        lp = wire.TokenLogprob(token=token, logprob=-0.5, bytes=list(token.encode()), top_logprobs=[
            wire.TopLogprob(token=token * 2, logprob=-1.0, bytes=list(token.encode()) * 3)])
        response = wire.Response(id="r", model="m", created=1, choices=[wire.Choice(content=token, logprobs=[lp])])
        verify.verify_response(bytes(wire.write_response(response)))
