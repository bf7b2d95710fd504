"""ingress/tracing/otlp.py against opentelemetry-proto: what it encodes parses into exactly the message the official
protobuf classes build from the same spans, for any attribute values a span may hold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

from ingress.tracing import otlp


@dataclass
class Record:
    trace_id: int = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    span_id: int = 0x00F067AA0BA902B7
    parent_id: int = 0
    trace_state: str | None = None
    name: str = "chat gpt-4o"
    kind: int = otlp.KIND_SERVER
    start_ns: int = 1_764_806_400_000_000_000
    end_ns: int = 1_764_806_400_250_000_000
    attributes: Mapping[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, Mapping[str, Any]]] = field(default_factory=list)
    status: int = otlp.STATUS_UNSET
    status_message: str = ""
    flags: int = 1
    remote_parent: bool = False


def _any(value: Any) -> AnyValue:
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(array_value=ArrayValue(values=[_any(v) for v in value]))


def _attributes(values: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in values.items() if v is not None]


def expected(resource: Mapping[str, Any], spans: list[Record]) -> ExportTraceServiceRequest:
    """The message the official classes build: what a collector must read."""
    protos = []
    for s in spans:
        proto = SpanProto(
            trace_id=s.trace_id.to_bytes(16, "big"), span_id=s.span_id.to_bytes(8, "big"),
            trace_state=s.trace_state or "", parent_span_id=s.parent_id.to_bytes(8, "big") if s.parent_id else b"",
            name=s.name, kind=s.kind,  # type: ignore[arg-type]  # the enum's int
            start_time_unix_nano=s.start_ns, end_time_unix_nano=s.end_ns,
            attributes=_attributes(s.attributes),
            events=[SpanProto.Event(time_unix_nano=at, name=n, attributes=_attributes(a)) for n, at, a in s.events],
            flags=s.flags | 0x100 | (0x200 if s.remote_parent else 0))
        if s.status:
            proto.status.CopyFrom(Status(code=s.status, message=s.status_message))  # type: ignore[arg-type]
        protos.append(proto)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=_attributes(resource)),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name="ingress", version="0.1.0"), spans=protos)])])


def parsed(resource: Mapping[str, Any], spans: list[Record]) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    message.ParseFromString(otlp.export_request(otlp.resource_prefix(resource, "ingress", "0.1.0"), spans))
    return message


RESOURCE = {"service.name": "ingress", "telemetry.sdk.name": "ingress"}


def test_a_requests_spans_parse_into_the_official_message() -> None:
    server = Record(attributes={"gen_ai.operation.name": "chat", "gen_ai.request.max_tokens": 64,
                                "gen_ai.request.temperature": 0.5, "gen_ai.request.stream": True,
                                "gen_ai.response.finish_reasons": ["stop", "length"], "ingress.endpoint": None},
                    events=[("first_token", 1_764_806_400_100_000_000, {}),
                            ("usage", 1_764_806_400_250_000_000, {"cost_usd": 0.0081, "outcome": "ok"})],
                    parent_id=0x1122334455667788, remote_parent=True, trace_state="vendor=1",
                    status=otlp.STATUS_ERROR, status_message="The model service is unavailable.")
    attempt = Record(span_id=0x0102030405060708, parent_id=server.span_id, name="attempt", kind=otlp.KIND_CLIENT,
                     attributes={"server.address": "http://10.0.0.1:9000", "ingress.attempt": 1})
    assert parsed(RESOURCE, [server, attempt]) == expected(RESOURCE, [server, attempt])


def test_an_empty_batch_and_a_bare_span() -> None:
    assert parsed(RESOURCE, []) == expected(RESOURCE, [])
    assert parsed({}, [Record()]) == expected({}, [Record()])


scalars = st.one_of(st.text(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                    st.floats(allow_nan=False))
values = st.one_of(scalars, st.lists(scalars, max_size=4))  # an attribute's value, or an array of them


@given(attributes=st.dictionaries(st.text(min_size=1, max_size=40), values, max_size=12),
       name=st.text(max_size=300), status=st.sampled_from([0, 1, 2]), message=st.text(max_size=200),
       ids=st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.integers(0, 2**64 - 1)),
       times=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)))
def test_any_span_parses_into_the_official_message(attributes: dict[str, Any], name: str, status: int, message: str,
                                                   ids: tuple[int, int, int], times: tuple[int, int]) -> None:
    span = Record(trace_id=ids[0], span_id=ids[1], parent_id=ids[2], name=name, attributes=attributes,
                  events=[("usage", times[1], attributes)], status=status, status_message=message if status else "",
                  start_ns=times[0], end_ns=times[1])
    assert parsed(RESOURCE, [span]) == expected(RESOURCE, [span])


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**32, 2**63 - 1, -1, -(2**63)])
def test_varints_are_protobufs(n: int) -> None:
    assert AnyValue.FromString(b"\x18" + otlp.varint(n)).int_value == n


def test_repeated_values_are_encoded_once_and_a_name_with_many_values_stops_being_kept() -> None:
    first = otlp.attributes(9, {"ingress.tenant": "acme"})
    assert otlp.attributes(9, {"ingress.tenant": "acme"}) == first
    for i in range(500):
        otlp.attributes(9, {"test.request_id": f"{i:032x}"})
    assert len(otlp._STRS[9]["test.request_id"]) == otlp._PAIR_VALUES


def test_a_kept_value_is_never_served_for_an_equal_value_of_another_kind() -> None:
    for value in (1, True, 1.0, "1", 0, False, 0.0):  # equal as dict keys, each its own AnyValue
        for _ in range(2):  # the second time, from what was kept
            kv = KeyValue.FromString(otlp.attributes(9, {"test.kind": value})[2:])
            assert kv.value == _any(value)
