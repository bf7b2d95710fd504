"""ingress/encoding/stock.py: a chat request through the stock flatbuffers.Builder reads back as the generated
encoder's, and a reused Builder writes what a fresh one does."""

from __future__ import annotations

from bad_requests import body

from ingress.encoding.reading import decode_request
from ingress.encoding.requests import encode_request
from ingress.encoding.stock import encode_request_stock
from ingress.oai.codec import decode_chat_request
from ingress.wire import read_request
from ingress.wire.passport import Passport, model_name
from ingress.wire.stock import BuilderPool


def test_reused_builder_writes_the_same_bytes_as_a_fresh_one() -> None:
    big = decode_chat_request(body(messages=[{"role": "user", "content": "é" * 3000}], stop=["a", "b"], seed=7))
    small = decode_chat_request(body(temperature=0.5, metadata={"k": "v"}))
    pool = BuilderPool(size=1)
    encode_request_stock(pool, big, "req-1", Passport(tenant_id="t"))  # leaves stale bytes in the kept builder
    reused = encode_request_stock(pool, small, "req-2", Passport())
    assert pool.created == 1
    assert reused == encode_request_stock(BuilderPool(), small, "req-2", Passport())


def test_a_stock_buffer_reads_back_as_the_generated_encoders() -> None:
    request = decode_chat_request(body(
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}],
        temperature=0.25, stop=["\n"], seed=11, tools=[{"type": "function", "function": {"name": "f"}}]))
    passport = Passport(tenant_id="t", prompt_tokens_estimate=9, priority=3)

    stock = encode_request_stock(BuilderPool(), request, "req-1", passport, "openai", "gpt-4o-2024-08-06")
    fast = bytes(encode_request(request, "req-1", passport, "openai", "gpt-4o-2024-08-06"))

    read = decode_request(stock)
    assert read == decode_request(fast)
    assert (read.model, model_name(stock)) == ("gpt-4o-2024-08-06",) * 2  # the name the upstream is sent
    assert (read.messages, read.temperature, read.stop, read.seed) == (request.messages, 0.25, ["\n"], 11)
    assert [tool.function.name for tool in read.tools or [] if tool.function] == ["f"]
    assert read_request(stock).Passport().TenantId() == read_request(fast).Passport().TenantId() == b"t"
