"""The issuers' keys, fetched: each issuer's discovery document (`{issuer}/.well-known/openid-configuration`)
names its JWKS, read into the Verifier (bearer.py). Fetched at start and every `refresh_every` in the
background, and when a request's token names a key the set lacks: at most once per `min_refresh_interval`
per issuer, one fetch that every request asking meanwhile awaits, so a flood of tokens with made-up kids
costs the issuer one request per interval. Each fetch is bounded in time (`fetch_timeout`) and in size.

An issuer down at start does not stop the edge: keys keep working, and its tokens are refused with a 503
(IssuerUnavailable) until a fetch succeeds; an issuer down later keeps the set it last gave."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from ingress import tasks
from ingress.errors import IssuerUnavailable
from ingress.log import get_logger
from ingress.tenancy.bearer import KeySet, Verifier
from ingress.tenancy.settings import Issuer

log = get_logger("ingress.tenancy.jwks")
MAX_DOCUMENT = 1 << 20  # a discovery document or a JWKS is a few KB
_decode = msgspec.json.Decoder(dict[str, Any])


@dataclass
class _Fetching:
    issuer: Issuer
    jwks_uri: str | None
    attempted: float = -math.inf  # monotonic: the last fetch's start
    flight: asyncio.Task[None] | None = None
    discovery: dict[str, Any] | None = None  # the last discovery document read
    fetches: int = field(default=0)  # JWKS fetches started, for tests and metrics

    def landed(self, flight: asyncio.Task[None]) -> None:
        """The fetch ended: the next refresh may start another; its failure is taken (each awaiter logs it)."""
        self.flight = None
        if not flight.cancelled():
            flight.exception()


class KeySets:
    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self._state = {i.issuer: _Fetching(i, i.jwks_uri) for i in verifier.issuers.values()}
        self._session: aiohttp.ClientSession | None = None

    def fetches(self, issuer: str) -> int:
        return self._state[issuer].fetches

    async def refresh(self, issuer: str, *, due: bool = False) -> None:
        """Fetch the issuer's keys again, unless a fetch started less than `min_refresh_interval` ago (then
        nothing: the set stands) or is running (then await it). Raises IssuerUnavailable when the edge still
        has none of its keys afterwards. `due`: the periodic refresh, which the interval does not hold back."""
        state = self._state[issuer]
        if state.flight is None:
            now = time.monotonic()
            wait = state.attempted + state.issuer.min_refresh_interval - now
            if wait > 0 and not due:
                if issuer not in self.verifier.keys:
                    raise IssuerUnavailable("The sign-in service could not be reached; retry the request.",
                                            retry_after=max(math.ceil(wait), 1))
                return
            state.attempted = now
            state.fetches += 1
            state.flight = tasks.shared(self._fetch(state), f"jwks:{state.issuer.name}")
            state.flight.add_done_callback(state.landed)
        try:
            await asyncio.shield(state.flight)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # whatever went wrong, the request is told the issuer is unavailable
            log.warning("issuer keys not fetched", issuer=issuer, error=f"{type(exc).__name__}: {exc}"[:300])
        if issuer not in self.verifier.keys:
            raise IssuerUnavailable("The sign-in service could not be reached; retry the request.",
                                    retry_after=max(math.ceil(state.issuer.min_refresh_interval), 1))

    async def _fetch(self, state: _Fetching) -> None:
        issuer = state.issuer
        timeout = issuer.fetch_timeout
        if state.jwks_uri is None:
            discovery = state.discovery = await self._discover(issuer)
            uri = discovery.get("jwks_uri")
            if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                raise ValueError("the discovery document names no jwks_uri")
            state.jwks_uri = uri
        keys = KeySet(await self._get(state.jwks_uri, timeout))
        if not len(keys):
            raise ValueError("the JWKS holds no signing key")
        changed = self.verifier.keys.get(issuer.issuer)
        self.verifier.set_keys(issuer.issuer, keys)
        if changed is None or changed.kids != keys.kids:
            log.info("issuer keys fetched", issuer=issuer.issuer, keys=len(keys), kids=sorted(keys.kids)[:10])

    async def _discover(self, issuer: Issuer) -> dict[str, Any]:
        discovery = await self._get(issuer.issuer.rstrip("/") + "/.well-known/openid-configuration",
                                    issuer.fetch_timeout)
        if discovery.get("issuer") != issuer.issuer:
            raise ValueError(f"the discovery document names issuer {str(discovery.get('issuer'))[:200]!r}")
        return discovery

    async def discovery(self, issuer: str) -> dict[str, Any]:
        """The issuer's discovery document (its endpoints): the one its keys' last fetch read, else read now
        and kept. Raises what the fetch raised (aiohttp's errors, ValueError, TimeoutError)."""
        state = self._state[issuer]
        if state.discovery is None:
            state.discovery = await self._discover(state.issuer)
        return state.discovery

    def http(self) -> aiohttp.ClientSession:
        """The one HTTP session for the issuers' documents (and the admin SSO's token requests: sso.py), closed
        by close()."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _get(self, url: str, timeout: float) -> dict[str, Any]:
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        async with self.http().get(url, timeout=client_timeout, allow_redirects=False,
                                     headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                raise ValueError(f"{url} answered {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                body += chunk
                if len(body) > MAX_DOCUMENT:
                    raise ValueError(f"{url} answered more than {MAX_DOCUMENT} bytes")
        return _decode.decode(body)

    async def warm(self) -> None:
        """Every issuer's keys, at start: one that cannot be reached is logged, not fatal."""
        for issuer in self._state:
            with contextlib.suppress(IssuerUnavailable):
                await self.refresh(issuer)

    async def refresh_forever(self) -> None:
        """Fetch at start, then each issuer's keys again every `refresh_every` (its keys may have been
        withdrawn: a token of a withdrawn key is refused after the next refresh)."""
        await self.warm()
        every = min(state.issuer.refresh_every for state in self._state.values())
        while True:
            await asyncio.sleep(every)
            for issuer, state in self._state.items():
                if time.monotonic() - state.attempted >= state.issuer.refresh_every * 0.99:
                    with contextlib.suppress(IssuerUnavailable):
                        await self.refresh(issuer, due=True)

    async def close(self) -> None:
        for state in self._state.values():
            if state.flight is not None:
                state.flight.cancel()
                await asyncio.gather(state.flight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
