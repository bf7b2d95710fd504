"""Who may call what, and what a request must pass: the keys, tenants and model policies of `[tenancy]`,
read once (and again on SIGHUP, for a keys file), and the callers whose JWTs an issuer signed (bearer.py,
claims.py). Pure: no I/O but reading the keys file (an issuer's keys are fetched by jwks.py)."""

from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import translate
from pathlib import Path
from typing import Literal

import msgspec

from ingress.errors import Unauthenticated
from ingress.guardrails import Guard, compile_guardrails
from ingress.tenancy.bearer import Verifier, looks_like_jwt
from ingress.tenancy.claims import TokenRefused, identity_of
from ingress.tenancy.keys import Keyring, id_of
from ingress.tenancy.plan import Check, Plan, TokenPrice, checks_of
from ingress.tenancy.settings import Key, KeysFile, Limits, ModelPolicy, Tenancy, Tenant

_NO_TENANT = Tenant()
_NO_KEY = "You didn't provide an API key. Provide it in the Authorization header (Authorization: Bearer YOUR_KEY)."
_NO_GOOGLE_KEY = ("You didn't provide an API key. Provide it in the x-goog-api-key header (x-goog-api-key: YOUR_KEY), "
                  "as Google's SDKs and Gemini CLI send it, or in the key query parameter.")
_NO_ANTHROPIC_KEY = ("You didn't provide an API key. Provide it in the x-api-key header (x-api-key: YOUR_KEY), as "
                     "Anthropic's SDKs and Claude Code send it, or in the Authorization header.")
_NO_KEY_FOR = {"openai": _NO_KEY, "anthropic": _NO_ANTHROPIC_KEY, "google": _NO_GOOGLE_KEY}
Client = Literal["openai", "anthropic", "google"]  # whose API the request speaks: where its SDKs put a key
_CACHED_PLANS = 4096
# One answer to every token refused (expired, foreign, forged...): the reason is the access line's alone.
BAD_TOKEN = "The bearer token was not accepted. Sign in again to get a new one."


def _matcher(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns) or r"(?!)")


_ANY = _matcher(("*",))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is from: a key, or a subject of an issuer's token; its tenant, and its own limits."""

    id: str  # public: a key's id, or `<issuer name>:<subject>` (its limits' owner, the passport's key_id)
    tenant_name: str
    tenant: Tenant
    limits: Limits  # the key's, or the subject's (its plan's, else its issuer's)
    _models: re.Pattern[str]
    _tenant_models: re.Pattern[str]
    guards: tuple[Guard, ...]  # the tenant's guardrails, then the key's
    key: Key | None = None
    subject: str | None = None  # a token's subject claim, as its issuer gave it
    team: str | None = None  # a token's team claim (attribution only)
    _routes: re.Pattern[str] = _ANY  # the tenant's allowed routes, by name


    @property
    def key_id(self) -> str | None:
        return self.key.id if self.key is not None else None

    def allows(self, model: str) -> bool:
        return self._models.match(model) is not None and self._tenant_models.match(model) is not None

    def reaches(self, route: str) -> bool:
        """Whether its tenant allows the route named `route` (routing.chain.route_name) to serve it."""
        return self._routes.match(route) is not None


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key from `Authorization: Bearer`, `x-api-key` or `api-key` (Azure's), in that order."""
    auth = headers.get("Authorization")
    if auth is not None and auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key") or headers.get("api-key") or None


def read_keys_file(path: str) -> KeysFile:
    """The keys file; a ValueError names the file and what is wrong (never a key)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
        return msgspec.convert(raw, KeysFile)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _over(configured: Tenant | None, stored: Tenant) -> Tenant:
    """A stored tenant over the configured one of its name: its limits and models; the guardrails stay."""
    if configured is None or configured.guardrails is None or stored.guardrails is not None:
        return stored
    return msgspec.structs.replace(stored, guardrails=configured.guardrails)


class Policy:
    def __init__(self, settings: Tenancy, keys_file: KeysFile | None = None, verifier: Verifier | None = None,
                 stored: tuple[Key, ...] = (), stored_tenants: Mapping[str, Tenant] | None = None) -> None:
        """`stored` and `stored_tenants`: the keys and tenants the admin API keeps (ingress/admin), over those of
        the configuration and its keys file where an id (a name) is in both; a stored tenant has no guardrails
        of its own, and keeps those of the configured one it replaces."""
        self.settings = settings
        self.keys_file = keys_file
        self.stored = stored
        self.stored_tenants = dict(stored_tenants or {})
        self.verifier = verifier if verifier is not None or not settings.issuers else Verifier(settings.issuers)
        self._subjects: dict[tuple[str, str, str, str | None, str | None], Principal] = {}
        self._issuer_models = {issuer.issuer: _matcher(issuer.models) for issuer in settings.issuers}
        keys = tuple({key.id: key for key in (*settings.keys, *(keys_file.keys if keys_file else ()), *stored)}
                     .values())
        self.configured = {**settings.tenants, **(keys_file.tenants if keys_file else {})}
        self.tenants = {**self.configured, **{name: _over(self.configured.get(name), tenant)
                                              for name, tenant in self.stored_tenants.items()}}
        self.keyring = Keyring(keys)
        self._guards: dict[str, Guard] = {}  # each tenant's, compiled once
        self._principals = {key.id: self._principal(key) for key in keys}
        self._tenant_keys: dict[str, tuple[str, ...]] = {}
        for key in keys:
            self._tenant_keys[key.tenant] = (*self._tenant_keys.get(key.tenant, ()), key.id)
        self._exact = {name: p for name, p in settings.models.items() if not any(c in name for c in "*?[")}
        self._globs = [(name, re.compile(translate(name)), p) for name, p in settings.models.items()
                       if name not in self._exact]
        self.lease_us = int(settings.lease_ttl * 1_000_000)
        self._cache: dict[tuple[str, str], tuple[tuple[Check, ...], float]] = {}
        self._policies: dict[str, tuple[str, ModelPolicy] | None] = {}  # model_policy's answers, by name asked
        self._prices: dict[str, TokenPrice | None] = {}  # price_of's

    @classmethod
    def load(cls, settings: Tenancy, verifier: Verifier | None = None, stored: tuple[Key, ...] = (),
             stored_tenants: Mapping[str, Tenant] | None = None) -> Policy:
        """The policy of `settings` and its keys file; `verifier` keeps the issuers' keys across a reload, and
        `stored` and `stored_tenants` the admin API's keys and tenants."""
        return cls(settings, read_keys_file(settings.keys_file) if settings.keys_file else None, verifier, stored,
                   stored_tenants)

    def key_ids(self, tenant: str) -> tuple[str, ...]:
        """The ids of the tenant's keys (of the configuration, its keys file and the admin API)."""
        return self._tenant_keys.get(tenant, ())

    def _tenant_guard(self, name: str, tenant: Tenant) -> Guard | None:
        if tenant.guardrails is not None and name not in self._guards:
            self._guards[name] = compile_guardrails(tenant.guardrails)
        return self._guards.get(name)

    def _principal(self, key: Key) -> Principal:
        tenant = self.tenants.get(key.tenant, _NO_TENANT)
        guards = (self._tenant_guard(key.tenant, tenant),) + (
            (compile_guardrails(key.guardrails),) if key.guardrails else ())
        return Principal(key.id, key.tenant, tenant, key.limits, _matcher(key.models), _matcher(tenant.models),
                         tuple(g for g in guards if g is not None), key=key, _routes=_matcher(tenant.routes))

    def authenticate(self, headers: Mapping[str, str], presented: str | None = None, *,
                     client: Client = "openai") -> Principal:
        """The request's principal: its key's, or its JWT's (bearer.UnknownKey when the token names a key
        of its issuer the edge has not fetched: the caller refreshes the set and asks again). The key or token
        is `presented` (found by the edge where a dialect puts it: Google's clients send `x-goog-api-key` or
        `?key=`), else the one in the headers (presented_key). `client`: whose API the request speaks, to tell
        it where its SDKs put a key when it sent none."""
        presented = presented or presented_key(headers)
        if presented is None:
            raise Unauthenticated(_NO_KEY_FOR[client])
        if self.verifier is not None and looks_like_jwt(presented):
            try:
                return self._bearer(presented)
            except TokenRefused as refused:
                raise Unauthenticated(BAD_TOKEN) from refused
        key = self.keyring.find(presented)
        if key is None:
            shown = f" (key id '{key_id}')" if (key_id := id_of(presented)) else ""
            raise Unauthenticated(f"Incorrect API key provided{shown}. Check the key, or ask for a new one.")
        return self._principals[key.id]

    def _bearer(self, token: str) -> Principal:
        assert self.verifier is not None
        verified = self.verifier.verify(token)
        issuer = verified.issuer
        who = identity_of(verified.claims, issuer)
        cached = (issuer.name, who.subject, who.tenant, who.team, who.plan)
        principal = self._subjects.get(cached)
        if principal is not None:
            return principal
        tenant = self.tenants.get(who.tenant)
        if tenant is None:
            raise TokenRefused(f"tenant {who.tenant!r} is not declared")
        limits = issuer.limits
        if who.plan is not None:
            if who.plan not in issuer.plans:
                raise TokenRefused(f"plan {who.plan!r} is not one of the issuer's plans")
            limits = issuer.plans[who.plan]
        guard = self._tenant_guard(who.tenant, tenant)
        principal = Principal(f"{issuer.name}:{who.subject}", who.tenant, tenant, limits,
                              self._issuer_models[issuer.issuer], _matcher(tenant.models),
                              (guard,) if guard is not None else (), subject=who.subject, team=who.team,
                              _routes=_matcher(tenant.routes))
        if len(self._subjects) >= _CACHED_PLANS:
            self._subjects.clear()
        self._subjects[cached] = principal
        return principal

    def model_policy(self, model: str) -> tuple[str, ModelPolicy] | None:
        """The model's policy and the name it is configured under: its exact name, else the first glob that
        matches, in order. Each name's answer is kept, for a bounded number of names (a glob route lets clients
        name any model): admission and the usage record ask for every request, and globs are regexes."""
        try:
            return self._policies[model]
        except KeyError:
            pass
        policy = self._exact.get(model)
        found = (model, policy) if policy is not None else next(
            ((name, p) for name, pattern, p in self._globs if pattern.match(model)), None)
        if len(self._policies) >= _CACHED_PLANS:
            self._policies.clear()
        self._policies[model] = found
        return found

    def price_of(self, model: str) -> TokenPrice | None:
        """The model's price per token, as a `usd` budget charges it, or None when none is configured: no
        policy, or one whose price is zero both ways (a model policy without a price has that default). Kept
        a name, as model_policy's answers are: a usage record asks at every request's end."""
        try:
            return self._prices[model]
        except KeyError:
            pass
        found = self.model_policy(model)
        price = found[1].price if found is not None else None
        priced = TokenPrice.of(price) if price is not None and (price.input or price.output) else None
        if len(self._prices) >= _CACHED_PLANS:
            self._prices.clear()
        self._prices[model] = priced
        return priced

    def counts_prompts(self) -> bool:
        """Whether some request may need its prompt's exact count (`counts_prompt`): a key's, tenant's,
        subject's, plan's or model's limit charges input tokens (a USD budget where a model has an input
        price), or a guardrail's max_prompt_tokens reads them."""
        if any(guard.counts_tokens for principal in self._principals.values() for guard in principal.guards):
            return True
        if any(guard.counts_tokens for name, tenant in self.tenants.items()
               if (guard := self._tenant_guard(name, tenant)) is not None):
            return True
        priced = any(policy.price.input for policy in self.settings.models.values())
        limits = [*(principal.limits for principal in self._principals.values()),
                  *(tenant.limits for tenant in self.tenants.values()),
                  *(issuer.limits for issuer in self.settings.issuers),
                  *(plan for issuer in self.settings.issuers for plan in issuer.plans.values()),
                  *(policy.limits for policy in self.settings.models.values())]
        return any(limit.tpm is not None or limit.input_tpm is not None
                   or (limit.budget is not None
                       and (limit.budget.tokens is not None or (limit.budget.usd is not None and priced)))
                   for limit in limits)

    def counts_prompt(self, principal: Principal, model: str) -> bool:
        """Whether a request of `principal` for `model` needs its prompt's exact count: a limit charges its
        input tokens (tpm, input_tpm, a token budget, a USD budget at a price per input token) or a
        guardrail's max_prompt_tokens reads them. Otherwise the estimate is all it needs (ingress/tokens)."""
        if any(guard.counts_tokens for guard in principal.guards):
            return True
        checks = self._checks(principal, model, self.model_policy(model), time.time())
        return any(check.per_input for check in checks)

    def plan(self, principal: Principal, model: str, input_tokens: int, max_tokens: int | None) -> Plan:
        """The request's checks (its key's, its tenant's, its model's) and the estimate to reserve: the
        prompt's tokens and `max_tokens`, or, when the request sets none, a default (the model's, else
        `[tenancy] default_max_tokens`) that admission lowers to what the limits can ever admit (plan.fitted)."""
        now = time.time()
        found = self.model_policy(model)
        model_policy = found[1] if found is not None else ModelPolicy()
        checks = self._checks(principal, model, found, now)
        if max_tokens is not None:  # 0 for embeddings
            return Plan(os.urandom(12).hex(), checks, input_tokens, max_tokens)
        output = model_policy.default_max_tokens or self.settings.default_max_tokens
        return Plan(os.urandom(12).hex(), checks, input_tokens, output, default_output=True)

    def _checks(self, principal: Principal, model: str, found: tuple[str, ModelPolicy] | None,
                now: float) -> tuple[Check, ...]:
        """The checks of a key on a model, made again after a minute (the time left in a budget's period is
        then at most a minute old) or when a budget's period ends, for a bounded number of (key, model) pairs."""
        cached = self._cache.get((principal.id, model))
        if cached is not None and cached[1] > now:
            return cached[0]
        name, model_policy = found if found is not None else (model, ModelPolicy())
        default = self.settings.degraded
        checks: list[Check] = [
            *checks_of(principal.limits, "key" if principal.key is not None else "subject", principal.id,
                       model_policy.price, now, self.lease_us, default),
            *checks_of(principal.tenant.limits, "tenant", principal.tenant_name, model_policy.price, now,
                       self.lease_us, default),
        ]
        if found is not None:
            checks += checks_of(model_policy.limits, "model", name, model_policy.price, now, self.lease_us, default)
        if len(self._cache) >= _CACHED_PLANS:  # a glob route lets clients name any model
            self._cache.clear()
        until = min([now + 60, *(now + c.period_us / 1e6 for c in checks if c.algorithm == "quota")])
        made = tuple(checks)
        self._cache[(principal.id, model)] = (made, until)
        return made
