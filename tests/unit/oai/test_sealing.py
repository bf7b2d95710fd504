"""What the edge seals for clients to send back (ingress/oai/sealing.py): it opens as sealed, with any of
the configured keys; a modified blob, or one sealed by a key the edge does not hold, is a 400 naming the
item; a provider's own blob is not the edge's to open."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingress.errors import InvalidRequest
from ingress.oai.sealing import PREFIX, Sealed, Sealer, new_key, parse_key
from ingress.serve.app import SEALING_KEY, sealer
from ingress.settings import Sealing, SealKey, Settings

OLD, NEW = new_key(), new_key()


@given(st.text(max_size=200), st.sampled_from(["openai", "anthropic", "self_hosted"]))
def test_what_is_sealed_opens_as_it_was(text: str, provider: str) -> None:
    sealer = Sealer([("k1", OLD)])
    sealed = Sealed(text=text, provider=provider, model="m")
    blob = sealer.seal("reasoning", sealed)
    assert blob.startswith(f"{PREFIX}k1:")
    assert len(text) < 8 or text not in blob  # not readable in it
    assert sealer.open("reasoning", blob, "input[0].encrypted_content") == sealed


def test_keys_rotate_the_first_seals_every_one_opens() -> None:
    old = Sealer([("2026-11", OLD)]).seal("reasoning", Sealed(text="t"))
    rotated = Sealer([("2026-12", NEW), ("2026-11", OLD)])
    assert rotated.open("reasoning", old, "p") == Sealed(text="t")
    assert rotated.seal("reasoning", Sealed(text="t")).startswith(f"{PREFIX}2026-12:")


@pytest.mark.parametrize("change", ["flip", "cut", "kind", "garbage"])
def test_a_modified_blob_is_refused_naming_the_item(change: str) -> None:
    sealer = Sealer([("k1", OLD)])
    blob = sealer.seal("reasoning", Sealed(text="the plan"))
    head, body = blob.rsplit(":", 1)
    raw = bytearray(base64.urlsafe_b64decode(body))
    kind = "reasoning"
    if change == "flip":
        raw[-1] ^= 1
        blob = f"{head}:{base64.urlsafe_b64encode(raw).decode()}"
    elif change == "cut":
        blob = f"{head}:{base64.urlsafe_b64encode(raw[:-4]).decode()}"
    elif change == "kind":
        kind = "compaction"  # a reasoning blob is no compaction
    else:
        blob = f"{head}:not base64!"
    with pytest.raises(InvalidRequest) as caught:
        sealer.open(kind, blob, "input[3].encrypted_content")  # type: ignore[arg-type]
    assert caught.value.param == "input[3].encrypted_content" and caught.value.code == "invalid_encrypted_content"


def test_a_key_the_edge_does_not_hold_is_named_and_a_providers_blob_is_not_opened() -> None:
    blob = Sealer([("other", NEW)]).seal("reasoning", Sealed(text="t"))
    with pytest.raises(InvalidRequest, match="does not hold"):
        Sealer([("k1", OLD)]).open("reasoning", blob, "input[0].encrypted_content")
    assert Sealer([("k1", OLD)]).open("reasoning", "gAAAAABo-openai-own", "p") is None


def test_keys_are_32_bytes_of_base64() -> None:
    assert parse_key(base64.b64encode(OLD).decode(), "k") == OLD
    assert parse_key(base64.urlsafe_b64encode(OLD).decode(), "k") == OLD
    for bad in ("", "short", base64.b64encode(b"x" * 16).decode()):
        with pytest.raises(ValueError, match="32 bytes"):
            parse_key(bad, "k")


def test_the_edges_keys_come_from_sealing_else_one_made_at_start_for_every_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    configured = Settings(sealing=Sealing(keys=[SealKey(id="2026-12", key_env="SEAL_NEW"),
                                                SealKey(id="2026-11", key_env="SEAL_OLD")]))
    monkeypatch.setenv("SEAL_NEW", base64.b64encode(NEW).decode())
    monkeypatch.delenv("SEAL_OLD", raising=False)
    with pytest.raises(ValueError, match=r"\[sealing\] key '2026-11' \(\$SEAL_OLD\)"):
        sealer(configured)
    monkeypatch.setenv("SEAL_OLD", base64.b64encode(OLD).decode())
    old = Sealer([("2026-11", OLD)]).seal("reasoning", Sealed(text="t"))
    assert sealer(configured).open("reasoning", old, "p") == Sealed(text="t")

    monkeypatch.delenv(SEALING_KEY, raising=False)
    first = sealer(Settings())  # made, and left in the environment for the workers this process starts
    blob = first.seal("compaction", Sealed(text="summary"))
    assert sealer(Settings()).open("compaction", blob, "p") == Sealed(text="summary")
