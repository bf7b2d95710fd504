"""The console's "Sign in with SSO" (docs/admin.md, "Console"): the authorization-code flow with PKCE, the edge
the OIDC provider's client ([admin.oidc] redirect_uri, client_id, client_secret_env, scopes, session_max).

    GET /admin/v1/session/oidc           a flow started (authcode.py): its state, nonce and PKCE verifier kept
                                         where the sessions are (session.py: one use, for FLOW_S), the browser
                                         bound to its state by a cookie (SameSite=Lax: sent on the provider's
                                         redirect back; for this path alone), and sent (302) to the provider's
                                         authorization endpoint, as its discovery document names it
    GET /admin/v1/session/oidc/callback  the state checked against the cookie and taken (once), the code
                                         exchanged at the token endpoint with the verifier, the ID token
                                         verified as admins' Bearer tokens are (oidc.py) and its nonce checked,
                                         its role read; then the session cookie the key sign-in gives (actor
                                         `oidc:<subject>`), and a redirect (302) to /admin/

An address that failed session.FAILURES sign-ins, or started STARTS, within session.WINDOW_S starts no more
(each start keeps a flow in the store until its callback or FLOW_S): it is sent back to the console at once.
A callback that signs no one in is logged with its reason, counted as a failed sign-in of its address (the
key sign-in's limit: session.py), and sent to `/admin/#signin-error=<reason>`, where the console says why.
The routes exist only when redirect_uri is configured; the console's page then shows the button.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping

import aiohttp
import msgspec
from aiohttp import web

from ingress.admin import authcode, session
from ingress.admin.authcode import Flow, Refused
from ingress.admin.keystore import Unavailable
from ingress.admin.oidc import NoSignIn, SignIns, actor_of, held
from ingress.log import get_logger
from ingress.tenancy.claims import TokenRefused
from ingress.tenancy.jwks import MAX_DOCUMENT

log = get_logger("ingress.admin")
START = "/admin/v1/session/oidc"
CALLBACK = START + "/callback"
FLOW_COOKIE = "ingress_admin_oidc"
CONSOLE = "/admin/"
_UNCOUNTED = ("rate_limited", "unavailable")  # not the sign-in's fault: no failure counted
STARTS = 20  # sign-ins an address may start within session.WINDOW_S (a person retrying: a few)


class Sso:
    """The client: the provider's endpoints (its discovery document, read with its keys: jwks.py), and its
    secret (read at start). Its token requests go out on the key fetcher's HTTP session."""

    def __init__(self, signins: SignIns, secret: str | None) -> None:
        self.signins = signins
        self.oidc = signins.oidc
        self.secret = secret

    async def endpoint(self, name: str) -> str:
        try:
            discovery = await self.signins.keysets.discovery(self.oidc.issuer)
        except (aiohttp.ClientError, ValueError, TimeoutError, msgspec.DecodeError) as exc:
            raise Refused("unavailable", f"the provider's discovery document: {type(exc).__name__}: {exc}"[:300]
                          ) from None
        return authcode.endpoint(discovery, name)

    async def exchange(self, code: str, flow: Flow) -> str:
        """The ID token the token endpoint gives for the code; Refused when it gives none."""
        url = await self.endpoint("token_endpoint")
        form, headers = authcode.token_request(code, flow, self.oidc, self.secret)
        try:
            async with self.signins.keysets.http().post(url, data=form, headers=headers, allow_redirects=False,
                                       timeout=aiohttp.ClientTimeout(total=self.oidc.fetch_timeout)) as answer:
                body = await answer.content.read(MAX_DOCUMENT + 1)
                status = answer.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Refused("exchange", f"the token endpoint: {type(exc).__name__}: {exc}"[:300]) from None
        if len(body) > MAX_DOCUMENT:
            raise Refused("exchange", f"the token endpoint answered more than {MAX_DOCUMENT} bytes")
        return authcode.id_token_of(status, body)

    async def session_of(self, claims: Mapping[str, object], flow: Flow) -> session.Session:
        """The console session the verified ID token's claims make; Refused when they make none."""
        authcode.check_id_token(claims, flow, self.oidc.client)
        try:
            actor = actor_of(claims, self.oidc)
        except TokenRefused as exc:
            raise Refused("token", str(exc)) from None
        if actor.role is None:
            raise Refused("no_role", f"{actor.id}: its {self.oidc.role_claim!r} claim holds none of the values "
                          "configured for a role")
        return session.Session(actor=actor.id, csrf="", expires_at=time.time() + self.oidc.session_max, oidc=True,
                               values=tuple(sorted(held(claims, self.oidc))))


SSO = web.AppKey("sso", Sso)


def is_open(request: web.Request) -> bool:
    """The flow's two steps: the browser has no credential yet (each checks what it needs itself)."""
    return request.method == "GET" and request.path in (START, CALLBACK)


def _to_console(fragment: str = "") -> web.Response:
    answer = web.Response(status=302, headers={"Location": CONSOLE + fragment})
    answer.del_cookie(FLOW_COOKIE, path=START)
    return answer


async def _may_start(sessions: session.Sessions, client: str) -> None:
    """Refused (rate_limited) for an address past its failed sign-ins, or past STARTS, each counted once."""
    count, left = await sessions.failures(client)
    if count >= session.FAILURES:  # its callback would be refused unchecked
        raise Refused("rate_limited", f"{count} failed sign-ins from the address; {left:.0f} s to wait")
    count, left = await sessions.started(client)
    if count > STARTS:
        raise Refused("rate_limited", f"{count} sign-ins started from the address within {session.WINDOW_S:.0f} s; "
                      f"{left:.0f} s to wait")


async def start(request: web.Request) -> web.Response:
    sso = request.app[SSO]
    try:
        await _may_start(request.app[session.SESSIONS], request.remote or "")
        url = await sso.endpoint("authorization_endpoint")
        state, flow = authcode.new_flow(time.time())
        await request.app[session.SESSIONS].put_flow(session.digest(state), flow)
    except Refused as exc:
        return _refused(request, exc)
    except Unavailable:
        return _refused(request, Refused("unavailable", "the session store did not answer"))
    answer = web.Response(status=302, headers={"Location": authcode.authorization_url(url, sso.oidc, state, flow)})
    answer.set_cookie(FLOW_COOKIE, state, max_age=int(authcode.FLOW_S), path=START, httponly=True, samesite="Lax",
                      secure=session.secure(request))
    return answer


async def _signed_in(request: web.Request) -> session.Session:
    """The session the callback's flow ends with; Refused when none."""
    sso, sessions = request.app[SSO], request.app[session.SESSIONS]
    try:
        state = authcode.callback_state(request.query, request.cookies.get(FLOW_COOKIE))
    except Refused:
        authcode.code_of(request.query)  # the provider's error, sent without the state (some do), says more
        raise
    flow = await sessions.take_flow(session.digest(state))
    if flow is None or flow.expires_at <= time.time():
        raise Refused("state", "no sign-in under way has this state (used, expired, or never started)")
    id_token = await sso.exchange(authcode.code_of(request.query), flow)
    try:
        claims = await sso.signins.claims(id_token)
    except NoSignIn as exc:
        raise Refused("unavailable" if exc.status == 503 else "token", f"the ID token: {exc}") from None
    return await sso.session_of(claims, flow)


async def callback(request: web.Request) -> web.Response:
    sessions = request.app[session.SESSIONS]
    client = request.remote or ""
    try:
        count, left = await sessions.failures(client)
        if count >= session.FAILURES:  # refused unchecked, as the key sign-in is
            raise Refused("rate_limited", f"{count} failed sign-ins from the address; {left:.0f} s to wait")
        token, opened = await session.opened(sessions, await _signed_in(request))
    except Refused as exc:
        if exc.reason not in _UNCOUNTED:
            with contextlib.suppress(Unavailable):
                await sessions.failed(client)
        return _refused(request, exc)
    except Unavailable:
        return _refused(request, Refused("unavailable", "the session store did not answer"))
    log.info("console signed in", actor=opened.actor, client=client, method="oidc")
    answer = _to_console()
    session.give_cookie(answer, request, token, opened)
    return answer


def _refused(request: web.Request, exc: Refused) -> web.Response:
    log.warning("console sign-in refused", method="oidc", reason=exc.reason, detail=str(exc)[:300],
                client=request.remote)
    return _to_console(f"#signin-error={exc.reason}")


def add_routes(app: web.Application, signins: SignIns | None,
               environ: Mapping[str, str] = os.environ) -> bool:
    """The flow's routes, when [admin.oidc] names a redirect_uri; whether it does."""
    if signins is None or signins.oidc.redirect_uri is None:
        return False
    name = signins.oidc.client_secret_env
    app[SSO] = Sso(signins, environ.get(name) if name else None)
    app.router.add_get(START, start, allow_head=False)
    app.router.add_get(CALLBACK, callback, allow_head=False)
    return True
