"""Admins signed in with an OIDC provider (`[admin.oidc]`): their JWTs verified as the data plane's callers'
are (the same Verifier and key sets: ingress/tenancy/bearer.py, jwks.py; no JOSE here), their role read from
a claim, and who they are (`oidc:<subject>`) for the audit log.

A token that does not verify (forged, expired, of another audience or issuer) is refused with one answer, its
reason kept for the log; a token naming a key the set lacks fetches the set again first (at most once per
`min_refresh_interval`); a provider whose keys were never fetched is a 503 with Retry-After; a verified token
whose role claim holds none of the configured values is a 403.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from ingress import tasks
from ingress.admin.settings import AdminOidc
from ingress.errors import IssuerUnavailable
from ingress.tenancy.bearer import UnknownKey, Verifier
from ingress.tenancy.claims import TokenRefused, claim
from ingress.tenancy.jwks import KeySets

Role = Literal["admin", "viewer"]
_SUBJECT_MAX = 256


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes an admin request: an admin key's id, or `oidc:<subject>`; and its role (None: it has none)."""

    id: str
    role: Role | None


class NoSignIn(Exception):
    """A token that is no admin's: `status` (401, or 503 when the provider's keys cannot be had), the reason
    for the log, and Retry-After's seconds for a 503."""

    def __init__(self, status: int, reason: str, retry_after: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.retry_after = retry_after


def held(claims: Mapping[str, object], oidc: AdminOidc) -> frozenset[str]:
    """The configured values (admin_values, viewer_values) the role claim (a string, or a list of them) holds."""
    value = claim(claims, oidc.role_claim)
    found = {value} if isinstance(value, str) else {v for v in value if isinstance(v, str)} if isinstance(
        value, list) else set()
    return frozenset(found & {*oidc.admin_values, *oidc.viewer_values})


def role_of(claims: Mapping[str, object], oidc: AdminOidc) -> Role | None:
    """The role the claims give: `admin` if the role claim holds any of admin_values, else `viewer` for any
    of viewer_values, else None."""
    return role_held(held(claims, oidc), oidc)


def role_held(values: frozenset[str], oidc: AdminOidc) -> Role | None:
    """The role these role-claim values give under the configuration as it is now."""
    if values & set(oidc.admin_values):
        return "admin"
    if values & set(oidc.viewer_values):
        return "viewer"
    return None


def actor_of(claims: Mapping[str, object], oidc: AdminOidc) -> Actor:
    subject = claim(claims, oidc.subject_claim)
    if not isinstance(subject, str) or not 0 < len(subject) <= _SUBJECT_MAX or not subject.isprintable():
        raise TokenRefused(f"claim {oidc.subject_claim!r} (subject) is missing or not a string")
    return Actor(f"oidc:{subject}", role_of(claims, oidc))


class SignIns:
    """The provider's keys, fetched in the background for the admin app's life, and the tokens they verify."""

    def __init__(self, oidc: AdminOidc) -> None:
        self.oidc = oidc
        self.verifier = Verifier((oidc.issuer_settings(),))
        self.keysets = KeySets(self.verifier)

    async def claims(self, token: str) -> dict[str, object]:
        """The verified token's claims; NoSignIn when it does not verify."""
        try:
            try:
                verified = self.verifier.verify(token)
            except UnknownKey:
                await self.keysets.refresh(self.oidc.issuer)
                verified = self.verifier.verify(token)
            return verified.claims
        except (TokenRefused, UnknownKey) as exc:
            raise NoSignIn(401, f"{type(exc).__name__}: {exc}"[:200]) from None
        except IssuerUnavailable as exc:
            raise NoSignIn(503, "the provider's keys could not be fetched", exc.retry_after or 1) from None

    async def actor(self, token: str) -> Actor:
        """The token's actor; NoSignIn when it is none."""
        claims = await self.claims(token)
        try:
            return actor_of(claims, self.oidc)
        except TokenRefused as exc:
            raise NoSignIn(401, f"{type(exc).__name__}: {exc}"[:200]) from None

    async def running(self, app: web.Application) -> AsyncIterator[None]:
        """The admin app's cleanup context: the keys fetched at start and refreshed until it stops."""
        async with tasks.scoped(self.keysets.refresh_forever(), "admin-issuer-keys"):
            yield
        await self.keysets.close()
