"""The console's sign-in: an admin key exchanged for a session cookie, a CSRF token for every change, and
failed sign-ins limited per client address (docs/admin.md, "Console").

    POST   /admin/v1/session  {"key": "<admin key>"}: the cookie `ingress_admin_session` (a random token;
                              HttpOnly, SameSite=Strict, Path=/admin/, Secure over https) and
                              {"actor", "role", "csrf_token", "expires_at"}; 401 for no admin key; 429 with
                              Retry-After once FAILURES sign-ins failed from the address within WINDOW_S
    GET    /admin/v1/session  who is signed in, and the session's CSRF token (a page reloaded reads it again)
    DELETE /admin/v1/session  sign out: the session deleted, the cookie cleared

A request with the cookie and no Authorization header acts as the session's admin key, with its role as
configured now (a key taken out of the configuration ends its sessions), or as the person signed in with the
OIDC provider (sso.py: `oidc:<subject>`, the role its role claim's values give under [admin.oidc] as configured
now; without [admin.oidc] no such session is valid); a change (anything but GET and
HEAD) needs `X-CSRF-Token` equal to the session's, else 403. A caller presenting an admin key is not
concerned: its header is its proof. Sessions and failure counts live where the stored keys do
(`{<prefix>}:admin:session:<SHA-256 of the token>`, with its TTL, and `...:admin:login:<address>`), so every
worker and every replica knows them; the token itself is kept nowhere. So do the OIDC sign-ins under way
(`...:admin:flow:<SHA-256 of the state>`, taken once): the callback may reach another worker or replica; and
how many an address started (`...:admin:start:<address>`, sso.py's STARTS within WINDOW_S).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import msgspec
from aiohttp import web

from ingress.admin import api, records
from ingress.admin.authcode import Flow
from ingress.admin.keystore import KeyStore, RedisKeyStore, Unavailable
from ingress.admin.oidc import Actor, role_held
from ingress.log import get_logger
from ingress.tenancy.stores.resp_codec import Script

log = get_logger("ingress.admin")
COOKIE = "ingress_admin_session"
CSRF_HEADER = "X-CSRF-Token"
PATH = "/admin/v1/session"
SESSION_S = 8 * 3600.0  # a session's life, from its sign-in
FAILURES = 5  # failed sign-ins an address may make within WINDOW_S; the next ones are 429 until it ends
WINDOW_S = 60.0
_MEMORY_MOST = 10_000  # one process's sessions or addresses kept at most (the oldest go first)
T = TypeVar("T")

# One more of a count that ends WINDOW_S (ARGV[1], ms) after its first: the count, and ms until it ends
ONE_MORE = Script("""
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('PTTL', KEYS[1])}
""")
TAKEN = Script("""
local found = redis.call('GET', KEYS[1])
if found then redis.call('DEL', KEYS[1]) end
return found
""")
COUNTED = Script("""
return {tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1])}
""")


class Session(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    actor: str  # the admin key's id, or `oidc:<subject>`
    csrf: str
    expires_at: float  # Unix time
    oidc: bool = False  # signed in with the OIDC provider: its role is `values`' (never an admin key's)
    values: tuple[str, ...] = ()  # the configured role-claim values its ID token held


class Sessions(Protocol):
    async def put(self, digest: str, session: Session) -> None:
        """Kept until `session.expires_at`."""

    async def get(self, digest: str) -> Session | None: ...

    async def drop(self, digest: str) -> None: ...

    async def failures(self, client: str) -> tuple[int, float]:
        """The failed sign-ins counted for `client` and the seconds until its count ends."""

    async def failed(self, client: str) -> tuple[int, float]:
        """One more failure for `client` (a window of WINDOW_S starts with the first); as failures()."""

    async def started(self, client: str) -> tuple[int, float]:
        """One more SSO sign-in started by `client` (sso.py), counted as failed() counts; as failures()."""

    async def put_flow(self, digest: str, flow: Flow) -> None:
        """Kept until `flow.expires_at`, or until taken."""

    async def take_flow(self, digest: str) -> Flow | None:
        """The flow, removed: a state is good once."""


def _room(entries: dict[str, T], live: Callable[[T], bool]) -> dict[str, T]:
    """`entries` that are still `live`, their oldest dropped past _MEMORY_MOST: room for one more."""
    kept = {k: v for k, v in entries.items() if live(v)}
    while len(kept) >= _MEMORY_MOST:
        del kept[next(iter(kept))]
    return kept


class _Counts:
    """One process's counts per address, each ending WINDOW_S after its first (the oldest dropped past
    _MEMORY_MOST)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.counts: dict[str, tuple[int, float]] = {}  # address → (count, when the window ends)

    def of(self, client: str) -> tuple[int, float]:
        count, ends = self.counts.get(client, (0, 0.0))
        left = ends - self.now()
        return (count, left) if left > 0 else (0, 0.0)

    def one_more(self, client: str) -> tuple[int, float]:
        now = self.now()
        count, left = self.of(client)
        ends = now + left if count else now + WINDOW_S
        if client not in self.counts and len(self.counts) >= _MEMORY_MOST:
            self.counts = _room(self.counts, lambda f: f[1] > now)
        self.counts[client] = (count + 1, ends)
        return count + 1, ends - now


class MemorySessions:
    """One process's: beside MemoryKeyStore (one worker, config.py)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._failures = _Counts(self._now)
        self._starts = _Counts(self._now)
        self._flows: dict[str, Flow] = {}

    def _now(self) -> float:
        return self.clock()

    async def put(self, digest: str, session: Session) -> None:
        now = self._now()
        self._sessions = _room(self._sessions, lambda s: s.expires_at > now)
        self._sessions[digest] = session

    async def get(self, digest: str) -> Session | None:
        found = self._sessions.get(digest)
        return found if found is not None and found.expires_at > self._now() else None

    async def drop(self, digest: str) -> None:
        self._sessions.pop(digest, None)

    async def failures(self, client: str) -> tuple[int, float]:
        return self._failures.of(client)

    async def failed(self, client: str) -> tuple[int, float]:
        return self._failures.one_more(client)

    async def started(self, client: str) -> tuple[int, float]:
        return self._starts.one_more(client)

    async def put_flow(self, digest: str, flow: Flow) -> None:
        now = self._now()
        self._flows = _room(self._flows, lambda f: f.expires_at > now)
        self._flows[digest] = flow

    async def take_flow(self, digest: str) -> Flow | None:
        found = self._flows.pop(digest, None)
        return found if found is not None and found.expires_at > self._now() else None


class RedisSessions:
    """In the key store's server, on its connection, under its hash tag, each call with its deadline
    (RedisKeyStore's call and script: Unavailable when the store did not answer)."""

    def __init__(self, store: RedisKeyStore) -> None:
        self.store = store
        self.tag = store.names[0].removesuffix("keys")

    async def _script(self, script: Script, key: str, *args: str | int) -> tuple[int, float]:
        reply = await self.store.script(script, (key,), args)
        count, ttl_ms = reply if isinstance(reply, list) else (0, 0)
        return int(count), max(int(ttl_ms), 0) / 1000 if int(count) else 0.0

    async def put(self, digest: str, session: Session) -> None:
        ttl_ms = max(int((session.expires_at - time.time()) * 1000), 1)
        await self.store.call("SET", self.tag + "session:" + digest, msgspec.json.encode(session), "PX", ttl_ms)

    async def get(self, digest: str) -> Session | None:
        return _decoded(await self.store.call("GET", self.tag + "session:" + digest), Session)

    async def drop(self, digest: str) -> None:
        await self.store.call("DEL", self.tag + "session:" + digest)

    async def failures(self, client: str) -> tuple[int, float]:
        return await self._script(COUNTED, self.tag + "login:" + client)

    async def failed(self, client: str) -> tuple[int, float]:
        return await self._script(ONE_MORE, self.tag + "login:" + client, int(WINDOW_S * 1000))

    async def started(self, client: str) -> tuple[int, float]:
        return await self._script(ONE_MORE, self.tag + "start:" + client, int(WINDOW_S * 1000))

    async def put_flow(self, digest: str, flow: Flow) -> None:
        ttl_ms = max(int((flow.expires_at - time.time()) * 1000), 1)
        await self.store.call("SET", self.tag + "flow:" + digest, msgspec.json.encode(flow), "PX", ttl_ms)

    async def take_flow(self, digest: str) -> Flow | None:
        # GET and DEL at once: of two callbacks with one state, one finds it
        return _decoded(await self.store.script(TAKEN, (self.tag + "flow:" + digest,)), Flow)


def _decoded(reply: object, kind: type[T]) -> T | None:
    """A stored session or flow; None for none, or for a value not one of ours."""
    if not isinstance(reply, bytes):
        return None
    try:
        return msgspec.json.decode(reply, type=kind)
    except msgspec.DecodeError:
        return None


SESSIONS = web.AppKey("sessions", Sessions)
FOUND = web.RequestKey("session", Session)


def sessions_for(store: KeyStore) -> Sessions:
    """Where `store` keeps the keys: its Redis (every worker and replica), or this process."""
    if isinstance(store, RedisKeyStore):
        return RedisSessions(store)
    return MemorySessions()


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def secure(request: web.Request) -> bool:
    """Over https, here or at a proxy in front: the cookie is then sent over https alone."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"


def is_open(request: web.Request) -> bool:
    """Signing in and out: no admin key asked first (each checks what it needs itself)."""
    return request.path == PATH and request.method in ("POST", "DELETE")


def _actor_of(request: web.Request, found: Session) -> Actor | None:
    """The session's actor with its role as configured now; None when it has none any more."""
    if found.oidc:
        signins = request.app.get(api.SIGNINS)
        role = role_held(frozenset(found.values), signins.oidc) if signins is not None else None
        return Actor(found.actor, role) if role is not None else None
    key = request.app[api.ADMIN_KEYS].get(found.actor)
    return Actor(key.id, key.role) if key is not None else None


async def actor(request: web.Request) -> Actor | web.Response | None:
    """The actor of the request's session cookie (None: no valid session), or the refusal of a change that
    did not send the session's CSRF token (403), or of a store that did not answer (503)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        found = await request.app[SESSIONS].get(digest(token))
    except Unavailable:
        return api.failure(503, "store_unavailable", "The session store did not answer; try again.",
                           **{"Retry-After": api.RETRY_AFTER})
    if found is None or found.expires_at <= time.time() or (key := _actor_of(request, found)) is None:
        return None
    if request.method not in api.READS and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), found.csrf.encode()):
        return api.failure(403, "csrf", f"A change made with the console's session needs its {CSRF_HEADER} header.")
    request[FOUND] = found
    return key


def _too_many(left: float) -> web.Response:
    wait = max(int(left + 0.999), 1)
    return api.failure(429, "rate_limited", f"Too many failed sign-ins from this address; try again in {wait} s.",
                       **{"Retry-After": str(wait)})


async def sign_in(request: web.Request) -> web.Response:
    sessions = request.app[SESSIONS]
    client = request.remote or ""
    try:
        body = msgspec.json.decode(await request.read() or b"{}", type=records.SignIn)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return api.failure(400, "invalid_request", str(exc))
    try:
        count, left = await sessions.failures(client)
        if count >= FAILURES:  # refused unchecked: the right key too, until the window ends
            return _too_many(left)
        key = api.admin_of(request.app[api.ADMIN_KEYS], body.key)
        if key is None:
            count, left = await sessions.failed(client)
            log.warning("console sign-in refused", client=client, failures=count)
            return api.failure(401, "unauthenticated", "That is not an admin key.")
        token, session = await opened(sessions, Session(actor=key.id, csrf="", expires_at=time.time() + SESSION_S))
    except Unavailable:
        return api.failure(503, "store_unavailable", "The session store did not answer; try again.",
                           **{"Retry-After": api.RETRY_AFTER})
    log.info("console signed in", actor=key.id, client=client)
    answer = web.json_response({"actor": key.id, "role": key.role, "csrf_token": session.csrf,
                                "expires_at": session.expires_at})
    give_cookie(answer, request, token, session)
    return answer


async def opened(sessions: Sessions, session: Session) -> tuple[str, Session]:
    """A new session like `session` (its CSRF token made here), stored; and its cookie's token."""
    token, made = secrets.token_urlsafe(32), msgspec.structs.replace(session, csrf=secrets.token_urlsafe(32))
    await sessions.put(digest(token), made)
    return token, made


def give_cookie(answer: web.StreamResponse, request: web.Request, token: str, session: Session) -> None:
    """The session's cookie: HttpOnly, SameSite=Strict (no other site's page sends it), for /admin/ alone."""
    answer.set_cookie(COOKIE, token, max_age=max(round(session.expires_at - time.time()), 1), path="/admin/",
                      httponly=True, samesite="Strict", secure=secure(request))


async def whoami(request: web.Request) -> web.Response:
    """The caller: its admin key's id and role, and its session's CSRF token (null with an admin key)."""
    key = request[api.ACTOR]
    found = request.get(FOUND)
    return web.json_response({"actor": key.id, "role": key.role, "csrf_token": found.csrf if found else None,
                              "expires_at": found.expires_at if found else None})


async def sign_out(request: web.Request) -> web.Response:
    token = request.cookies.get(COOKIE)
    try:
        found = await request.app[SESSIONS].get(digest(token)) if token else None
        if found is not None:
            if not hmac.compare_digest(request.headers.get(CSRF_HEADER, "").encode(), found.csrf.encode()):
                return api.failure(403, "csrf", f"Signing out needs the session's {CSRF_HEADER} header.")
            await request.app[SESSIONS].drop(digest(token or ""))
            log.info("console signed out", actor=found.actor, client=request.remote)
    except Unavailable:
        return api.failure(503, "store_unavailable", "The session store did not answer; try again.",
                           **{"Retry-After": api.RETRY_AFTER})
    answer = web.json_response({"signed_out": True})
    answer.del_cookie(COOKIE, path="/admin/")
    return answer


def add_routes(app: web.Application, store: KeyStore) -> None:
    app[SESSIONS] = sessions_for(store)
    app.router.add_post(PATH, sign_in)
    app.router.add_get(PATH, whoami)
    app.router.add_delete(PATH, sign_out)
