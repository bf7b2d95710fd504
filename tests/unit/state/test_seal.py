"""What the response store keeps, sealed at rest (ingress/state/seal.py): it opens in its own place only,
with any configured key; the first key seals; keys come from the environment, named by `[responses]`."""

from __future__ import annotations

import base64
import os

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingress.state.seal import MAGIC, OVERHEAD, AtRest, at_rest, key_id, parse_keys
from ingress.state.settings import ResponsesSettings

OLD, NEW = bytes(range(32)), bytes(range(1, 33))


@given(st.binary(max_size=2048), st.sampled_from(["response", "conversation", "item", "event"]))
def test_what_is_sealed_opens_as_it_was_and_holds_none_of_it(data: bytes, kind: str) -> None:
    sealer = AtRest([OLD])
    blob = sealer.seal(kind, "acme/3f9c2a7d", "resp_1", data)  # type: ignore[arg-type]  # each Kind drawn
    assert blob.startswith(MAGIC) and len(blob) == len(data) + OVERHEAD
    assert sealer.open(kind, "acme/3f9c2a7d", "resp_1", blob) == data  # type: ignore[arg-type]  # as above
    if len(data) >= 8:
        assert data not in blob


def test_two_seals_of_one_value_differ() -> None:
    sealer = AtRest([OLD])
    assert sealer.seal("response", "o", "resp_1", b"same") != sealer.seal("response", "o", "resp_1", b"same")


@pytest.mark.parametrize(("kind", "owner", "ident"), [
    ("response", "globex/3f9c2a7d", "resp_1"),  # copied under another tenant's key
    ("response", "acme/0000aaaa", "resp_1"),  # another key of the same tenant
    ("response", "acme/3f9c2a7d", "resp_2"),  # another response of the same owner
    ("event", "acme/3f9c2a7d", "resp_1"),  # another kind of value in its place
])
def test_a_value_moved_to_another_place_does_not_open(kind: str, owner: str, ident: str) -> None:
    sealer = AtRest([OLD])
    blob = sealer.seal("response", "acme/3f9c2a7d", "resp_1", b'{"prompt": "the secret"}')
    assert sealer.open(kind, owner, ident, blob) is None  # type: ignore[arg-type]  # each Kind named


def test_a_modified_or_cut_or_plain_value_does_not_open() -> None:
    sealer = AtRest([OLD])
    blob = sealer.seal("item", "o", "conv_1", b'{"type": "message"}')
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    for bad in (flipped, blob[:-1], blob[:OVERHEAD - 1], b'{"type": "message"}', b""):
        assert sealer.open("item", "o", "conv_1", bad) is None


def test_keys_rotate_the_first_seals_every_one_opens() -> None:
    old = AtRest([OLD]).seal("response", "o", "resp_1", b"before")
    rotated = AtRest([NEW, OLD])
    assert rotated.open("response", "o", "resp_1", old) == b"before"
    new = rotated.seal("response", "o", "resp_1", b"after")
    assert new[len(MAGIC):len(MAGIC) + 8] == key_id(NEW)
    assert AtRest([NEW]).open("response", "o", "resp_1", new) == b"after"
    assert AtRest([NEW]).open("response", "o", "resp_1", old) is None  # the old key dropped: no longer opens


def test_a_key_is_32_bytes() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        AtRest([b"short"])
    with pytest.raises(ValueError, match="32 bytes"):
        AtRest([])


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_keys_are_read_from_the_variables_the_settings_name() -> None:
    settings = ResponsesSettings(seal_key_env="SEAL", seal_old_keys_env="SEAL_OLD")
    url_safe = base64.urlsafe_b64encode(OLD).decode()
    sealer = at_rest(settings, {"SEAL": _b64(NEW), "SEAL_OLD": f"{_b64(OLD)}, {url_safe}"})
    assert sealer is not None
    assert sealer.open("event", "o", "resp_1", AtRest([OLD]).seal("event", "o", "resp_1", b"e")) == b"e"
    assert AtRest([NEW]).open("event", "o", "resp_1", sealer.seal("event", "o", "resp_1", b"e")) == b"e"
    assert at_rest(ResponsesSettings(), {"SEAL": _b64(NEW)}) is None  # not named: not sealed


@pytest.mark.parametrize("environ", [{}, {"SEAL": ""}, {"SEAL": "c2hvcnQ="}, {"SEAL": "not base64!"},
                                     {"SEAL": f"{_b64(NEW)},{_b64(OLD)}"}])
def test_a_missing_or_bad_key_names_its_variable(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"\$SEAL"):
        at_rest(ResponsesSettings(seal_key_env="SEAL"), environ)


def test_a_bad_former_key_names_its_variable() -> None:
    with pytest.raises(ValueError, match=r"\$SEAL_OLD"):
        at_rest(ResponsesSettings(seal_key_env="SEAL", seal_old_keys_env="SEAL_OLD"),
                {"SEAL": _b64(NEW), "SEAL_OLD": "c2hvcnQ="})


def test_former_keys_need_a_current_one() -> None:
    with pytest.raises(msgspec.ValidationError, match="seal_key_env"):
        msgspec.convert({"seal_old_keys_env": "SEAL_OLD"}, ResponsesSettings)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"seal_key_env": "not a name"}, ResponsesSettings)


def test_parse_keys_reads_a_list() -> None:
    keys = [os.urandom(32) for _ in range(3)]
    assert parse_keys(" ".join(_b64(k) for k in keys), "where") == keys
