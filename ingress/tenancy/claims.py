"""A verified token's claims as who is calling: its tenant, its subject, its team and its plan, as an
issuer's `claims` mapping reads them (settings.Claims). Pure; what is refused raises TokenRefused, whose
reason is for operators (the access line), never for the client."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ingress.tenancy.settings import Issuer

_NAME = re.compile(r"^[A-Za-z0-9._:-]{1,64}\Z")  # settings.Name: a tenant or plan is a store key and a label
_SUBJECT = re.compile(r"^[!-~]{1,256}\Z")  # visible ASCII, bounded: a store key, a header, a log field
_TEAM = re.compile(r"^[^\x00-\x1f\x7f]{1,128}\Z")


class TokenRefused(Exception):
    """Why a bearer token was not accepted: the access line's `error_detail`, never the client's answer."""


@dataclass(frozen=True, slots=True)
class Identity:
    tenant: str
    subject: str
    team: str | None
    plan: str | None


def claim(claims: Mapping[str, object], path: str) -> object | None:
    """The value at a dotted path (`realm_access.roles`), or None where any step is missing or not an object.
    A claim whose own name has a dot (a URL-named claim) is found whole first."""
    if path in claims:
        return claims[path]
    value: object = claims
    for step in path.split("."):
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return value


def _first(value: object) -> object:
    """A list's first element (groups, roles); anything else as it is."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _text(claims: Mapping[str, object], path: str, shape: re.Pattern[str], what: str, *, listed: bool) -> str:
    value = claim(claims, path)
    if listed:
        value = _first(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TokenRefused(f"claim {path!r} ({what}) is missing or not a string")
    text = str(value)
    if shape.match(text) is None:
        raise TokenRefused(f"claim {path!r} ({what}) is not a valid {what}")
    return text


def identity_of(claims: Mapping[str, object], issuer: Issuer) -> Identity:
    """Who the claims say is calling. The tenant comes from its claim (a string of a tenant's name's shape),
    else the issuer's fixed tenant; the subject must be there; a team and a plan are read when mapped and
    present (a list's first string)."""
    mapping = issuer.claims
    if mapping.tenant is not None:
        tenant = _text(claims, mapping.tenant, _NAME, "tenant", listed=False)
    elif issuer.tenant is not None:
        tenant = issuer.tenant
    else:  # config.py refuses an issuer with neither
        raise TokenRefused("the issuer names no tenant claim and no tenant")
    subject = _text(claims, mapping.subject, _SUBJECT, "subject", listed=False)
    team = plan = None
    if mapping.team is not None and claim(claims, mapping.team) not in (None, []):
        team = _text(claims, mapping.team, _TEAM, "team", listed=True)
    if mapping.plan is not None and claim(claims, mapping.plan) not in (None, []):
        plan = _text(claims, mapping.plan, _NAME, "plan", listed=True)
    return Identity(tenant, subject, team, plan)
