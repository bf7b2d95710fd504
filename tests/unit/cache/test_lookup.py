"""What the response cache reads of a request (ingress/cache/lookup.py): Cache-Control, the scope's value,
the key."""

from __future__ import annotations

import pytest

from ingress.cache.lookup import NO_CACHE, NO_STORE, directive, entry_key, scope_value


@pytest.mark.parametrize(("header", "expected"), [
    (None, None), ("", None), ("max-age=0", None), ("no-store", NO_STORE), ("No-Cache", NO_CACHE),
    ("max-age=0, no-cache", NO_CACHE), ("no-cache, no-store", NO_STORE), ("no-cache=\"x\"", NO_CACHE),
])
def test_cache_control(header: str | None, expected: str | None) -> None:
    assert directive(header) == expected


def test_each_scope_separates_whom_it_should() -> None:
    assert scope_value("tenant", "acme", "k1", None) == scope_value("tenant", "acme", "k2", None)
    assert scope_value("tenant", "acme", "k1", None) != scope_value("tenant", "globex", "k1", None)
    assert scope_value("key", "acme", "k1", None) != scope_value("key", "acme", "k2", None)
    assert scope_value("global", "acme", "k1", None) == scope_value("global", "globex", "k2", "Bearer x")
    # an open edge: the caller's forwarded credential is who it is, else everyone is one caller
    assert scope_value("tenant", None, None, "Bearer a") != scope_value("tenant", None, None, "Bearer b")
    assert "Bearer a" not in scope_value("tenant", None, None, "Bearer a")
    assert scope_value("tenant", None, None, None) == scope_value("key", None, None, None)


def test_the_key_depends_on_every_part_and_cannot_be_shifted_between_them() -> None:
    base = entry_key(b"request", "route", "model", "tenant:a")
    assert len(base) == 64
    assert base == entry_key(b"request", "route", "model", "tenant:a")
    for other in (entry_key(b"request!", "route", "model", "tenant:a"), entry_key(b"request", "r", "model", "tenant:a"),
                  entry_key(b"request", "route", "m", "tenant:a"), entry_key(b"request", "route", "model", "tenant:b"),
                  entry_key(b"request", "rout", "emodel", "tenant:a")):
        assert other != base
