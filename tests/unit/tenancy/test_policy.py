"""Keys and tenants to principals; what a key may call; a request's plan."""

from __future__ import annotations

import pytest

from ingress.errors import Unauthenticated
from ingress.guardrails import Guardrails
from ingress.tenancy.keys import new_key
from ingress.tenancy.plan import TokenPrice
from ingress.tenancy.policy import Policy, presented_key
from ingress.tenancy.settings import Budget, Key, Limits, ModelPolicy, Price, Tenancy, Tenant

KEY, KEY_ID, KEY_HASH = new_key()


def policy(**tenancy: object) -> Policy:
    settings = Tenancy(
        keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=("gpt-4o*", "llama-3"), limits=Limits(rpm=5)),),
        tenants={"acme": Tenant(models=("gpt-4o-mini", "llama-*"), limits=Limits(tpm=1000))},
        models={"gpt-4o-mini": ModelPolicy(price=Price(input=0.15, output=0.6), default_max_tokens=256),
                "llama-*": ModelPolicy(limits=Limits(concurrency=2))},
        **tenancy)  # type: ignore[arg-type]
    return Policy(settings)


@pytest.mark.parametrize("headers", [{"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer  {KEY} "},
                                     {"x-api-key": KEY}, {"api-key": KEY}])
def test_a_key_is_read_from_each_header_clients_use(headers: dict[str, str]) -> None:
    from multidict import CIMultiDict

    principal = policy().authenticate(CIMultiDict(headers))
    assert principal.key_id == principal.id == KEY_ID and principal.tenant_name == "acme"


def test_no_key_or_a_wrong_key_is_a_401_that_never_repeats_the_key() -> None:
    with pytest.raises(Unauthenticated) as missing:
        policy().authenticate({})
    assert missing.value.status == 401 and missing.value.code == "invalid_api_key"
    wrong = KEY[:-4] + "zzzz"
    with pytest.raises(Unauthenticated) as refused:
        policy().authenticate({"Authorization": f"Bearer {wrong}"})
    assert wrong not in refused.value.message and KEY_ID in refused.value.message  # the public id only
    assert presented_key({"Authorization": "Basic abc"}) is None


def test_a_client_without_a_key_is_told_the_header_its_sdks_send() -> None:
    with pytest.raises(Unauthenticated) as openai_like:
        policy().authenticate({})
    with pytest.raises(Unauthenticated) as google:
        policy().authenticate({}, None, client="google")
    with pytest.raises(Unauthenticated) as anthropic:
        policy().authenticate({}, None, client="anthropic")
    assert "Authorization: Bearer" in openai_like.value.message and "x-goog-api-key" not in openai_like.value.message
    assert "x-goog-api-key: YOUR_KEY" in google.value.message and "Authorization" not in google.value.message
    assert "x-api-key: YOUR_KEY" in anthropic.value.message
    assert google.value.status == anthropic.value.status == 401 and google.value.code == "invalid_api_key"
    assert policy().authenticate({}, KEY, client="google").id == KEY_ID  # a key presented: as for any client


def test_a_key_may_use_what_both_it_and_its_tenant_allow() -> None:
    principal = policy().authenticate({"x-api-key": KEY})
    assert principal.allows("gpt-4o-mini") and principal.allows("llama-3")
    assert not principal.allows("gpt-4o")  # the key's glob, not the tenant's list
    assert not principal.allows("llama-3.1")  # the tenant's glob, not the key's


def test_a_plan_holds_the_key_tenant_and_model_checks_and_reserves_the_output_bound() -> None:
    p = policy()
    principal = p.authenticate({"x-api-key": KEY})
    plan = p.plan(principal, "gpt-4o-mini", 120, None)
    assert [c.key for c in plan.checks] == [f"k:{KEY_ID}:rpm", "t:acme:tpm"]  # the model has no limits
    assert (plan.input_tokens, plan.output_tokens) == (120, 256)  # the model's default bound
    assert plan.default_output  # admission may lower it to what the limits can ever admit (plan.fitted)
    own = p.plan(principal, "gpt-4o-mini", 120, 10)
    assert own.output_tokens == 10 and not own.default_output
    assert p.plan(principal, "llama-3", 1, None).output_tokens == 4096  # [tenancy] default_max_tokens
    assert p.plan(principal, "llama-3", 1, 0).output_tokens == 0  # embeddings: prepare bounds their output at 0
    assert [c.key for c in p.plan(principal, "llama-3", 1, 1).checks][-1] == "m:llama-*:conc"
    assert p.plan(principal, "llama-3", 1, 1).ticket != p.plan(principal, "llama-3", 1, 1).ticket


def test_a_keys_checks_are_made_again_when_a_budget_period_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    import calendar
    import time

    from ingress.tenancy.settings import Budget

    clock = [calendar.timegm((2026, 12, 31, 23, 59, 30))]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    p = Policy(Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, limits=Limits(
        rpm=5, budget=Budget(tokens=100, period="day"))),), tenants={"acme": Tenant()}))
    principal = p.authenticate({"x-api-key": KEY})
    first = p.plan(principal, "m", 1, 1)
    assert p.plan(principal, "m", 1, 1).checks is first.checks  # made once
    assert first.checks[1].key == f"k:{KEY_ID}:btok:2026-12-31"
    clock[0] += 31  # past midnight: the day's budget is a new counter
    assert p.plan(principal, "m", 1, 1).checks[1].key == f"k:{KEY_ID}:btok:2027-01-01"


@pytest.mark.parametrize(("key", "tenant", "model", "counts"), [
    (Limits(rpm=5), Limits(), "llama-3", False),  # requests and slots only: the estimate will do
    (Limits(rpm=5, output_tpm=100, concurrency=2), Limits(), "gpt-4o-mini", False),
    (Limits(rpm=5), Limits(tpm=1000), "llama-3", True),  # the tenant's tpm charges the prompt
    (Limits(input_tpm=1000), Limits(), "llama-3", True),
    (Limits(budget=Budget(tokens=10**6)), Limits(), "llama-3", True),
    (Limits(budget=Budget(usd=5.0)), Limits(), "gpt-4o-mini", True),  # priced per input token
    (Limits(budget=Budget(usd=5.0)), Limits(), "llama-3", False),  # no price: the budget never sees the prompt
    (Limits(), Limits(), "gpt-4o-mini", False),
])
def test_a_request_needs_its_prompts_exact_count_only_when_a_limit_charges_it(key: Limits, tenant: Limits, model: str,
                                                                              counts: bool) -> None:
    settings = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=("*",), limits=key),),
                       tenants={"acme": Tenant(limits=tenant)},
                       models={"gpt-4o-mini": ModelPolicy(price=Price(input=0.15, output=0.6))})
    p = Policy(settings)
    assert p.counts_prompt(p.authenticate({"x-api-key": KEY}), model) is counts


def test_a_guardrail_bounding_the_prompts_tokens_needs_its_exact_count() -> None:
    for guardrails, counts in ((Guardrails(max_prompt_tokens=100), True), (Guardrails(blocked_terms=("x",)), False)):
        settings = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, guardrails=guardrails),))
        p = Policy(settings)
        assert p.counts_prompt(p.authenticate({"x-api-key": KEY}), "llama-3") is counts


def test_some_prompt_is_counted_exactly_only_where_a_limit_or_guardrail_reads_its_tokens() -> None:
    """What the edge asks at start: a vocabulary is built then only where some request will count with it."""

    def counts(**tenancy: object) -> bool:
        return Policy(Tenancy(**tenancy)).counts_prompts()  # type: ignore[arg-type]

    def key(limits: Limits) -> tuple[Key, ...]:
        return (Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, limits=limits),)

    usd = {"acme": Tenant(limits=Limits(budget=Budget(usd=5.0)))}
    assert not counts() and not counts(keys=key(Limits(rpm=5, output_tpm=10, concurrency=2)))
    assert counts(keys=key(Limits(tpm=5))) and counts(tenants={"acme": Tenant(limits=Limits(input_tpm=5))})
    assert counts(models={"x": ModelPolicy(limits=Limits(budget=Budget(tokens=5)))})
    assert not counts(tenants=usd) and counts(tenants=usd, models={"x": ModelPolicy(price=Price(input=1.0))})
    assert counts(tenants={"acme": Tenant(guardrails=Guardrails(max_prompt_tokens=100))})
    assert not counts(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, guardrails=Guardrails(blocked_terms=("x",))),))



def test_a_models_price_is_its_policys_per_token_resolved_once_a_name() -> None:
    price = Price(input=2.5, output=10.0)
    p = Policy(Tenancy(models={"gpt-4o*": ModelPolicy(price=price), "llama-*": ModelPolicy(limits=Limits(rpm=1)),
                               "free": ModelPolicy(price=Price())}))
    assert p.model_policy("gpt-4o-mini") == ("gpt-4o*", ModelPolicy(price=price))
    priced = TokenPrice(input=2_500, output=10_000)  # nano-USD a token, as a usd budget charges
    assert [p.price_of(m) for m in ("gpt-4o-mini", "llama-3", "free", "o3")] == [priced, None, None, None]
    p._globs.clear()  # each name's answer is kept: no glob is matched again for a name already asked
    assert [p.price_of(m) for m in ("gpt-4o-mini", "llama-3", "o3")] == [priced, None, None]
    assert p.model_policy("llama-3") == ("llama-*", ModelPolicy(limits=Limits(rpm=1)))
    assert p.price_of("gpt-4o-2024-08-06") is None


def test_a_jwt_is_a_subject_of_its_claims_tenant_with_its_plans_limits() -> None:
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    from ingress.tenancy.bearer import KeySet, UnknownKey
    from ingress.tenancy.claims import TokenRefused
    from ingress.tenancy.policy import BAD_TOKEN
    from ingress.tenancy.settings import Claims, Issuer

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    iss = "https://sso.example.com"
    p = policy(issuers=(Issuer(issuer=iss, audience=("ingress",), name="sso", models=("llama-*",),
                               claims=Claims(tenant="org_id", team="groups", plan="plan"),
                               limits=Limits(rpm=1), plans={"heavy": Limits(rpm=100)}),))
    assert p.verifier is not None
    p.verifier.set_keys(iss, KeySet({"keys": [{**RSAAlgorithm.to_jwk(private.public_key(), as_dict=True),
                                               "kid": "k1"}]}))

    def bearer(kid: str = "k1", **claims: object) -> dict[str, str]:
        body = {"iss": iss, "aud": "ingress", "sub": "alice@example.com", "exp": int(time.time()) + 60,
                "org_id": "acme", "groups": ["eng"], **claims}
        return {"Authorization": "Bearer " + jwt.encode(body, private, algorithm="RS256", headers={"kid": kid})}

    alice = p.authenticate(bearer())
    assert (alice.id, alice.tenant_name, alice.subject, alice.team, alice.key) == (
        "sso:alice@example.com", "acme", "alice@example.com", "eng", None)
    assert alice.allows("llama-3") and not alice.allows("gpt-4o-mini")  # the issuer's models, and the tenant's
    assert [c.key for c in p.plan(alice, "llama-3", 10, 10).checks] == [
        "s:sso:alice@example.com:rpm", "t:acme:tpm", "m:llama-*:conc"]
    assert p.plan(alice, "llama-3", 10, 10).checks[0].scope == "subject"
    heavy = p.authenticate(bearer(plan="heavy", sub="bob"))
    assert heavy.limits == Limits(rpm=100) and p.plan(heavy, "llama-3", 1, 1).checks[0].limit == 100
    for claims in ({"org_id": "initech"}, {"plan": "gold"}, {"aud": "other"}):  # undeclared tenant, unknown plan...
        with pytest.raises(Unauthenticated) as refused:
            p.authenticate(bearer(**claims))
        assert refused.value.message == BAD_TOKEN and isinstance(refused.value.__cause__, TokenRefused)
    with pytest.raises(UnknownKey):
        p.authenticate(bearer(kid="k2"))
    reloaded = Policy.load(p.settings, p.verifier)  # a SIGHUP keeps the issuer's keys
    assert reloaded.authenticate(bearer()).id == "sso:alice@example.com"


def test_stored_keys_join_the_configured_ones_and_win_where_an_id_is_in_both() -> None:
    configured, key_id, digest = new_key()
    stored, stored_id, stored_digest = new_key()
    settings = Tenancy(tenants={"acme": Tenant(), "beta": Tenant()}, keys=(Key(id=key_id, tenant="acme", hash=digest),))
    policy = Policy(settings, stored=(Key(id=stored_id, tenant="acme", hash=stored_digest),
                                      Key(id=key_id, tenant="beta", hash=digest)))
    assert policy.authenticate({"Authorization": f"Bearer {stored}"}).id == stored_id
    assert policy.authenticate({"Authorization": f"Bearer {configured}"}).tenant_name == "beta"
    assert Policy.load(settings, stored=policy.stored).keyring.find(stored) is not None


def test_a_stored_tenant_replaces_the_configured_one_but_keeps_its_guardrails() -> None:
    _, key_id, digest = new_key()
    guarded = Tenant(limits=Limits(rpm=600), guardrails=Guardrails(max_prompt_tokens=100))
    settings = Tenancy(tenants={"acme": guarded}, keys=(Key(id=key_id, tenant="acme", hash=digest),))
    policy = Policy(settings, stored_tenants={"acme": Tenant(limits=Limits(rpm=1), models=("small-*",)),
                                              "beta": Tenant(limits=Limits(tpm=10))})
    acme = policy.tenants["acme"]
    assert acme.limits.rpm == 1 and acme.models == ("small-*",) and acme.guardrails == guarded.guardrails
    assert policy.tenants["beta"].limits.tpm == 10 and policy.configured == {"acme": guarded}
    principal = policy._principals[key_id]
    assert principal.allows("small-1") and not principal.allows("large-1") and principal.guards
    checks = policy.plan(principal, "small-1", 10, 10).checks
    assert [(c.owner, c.limit) for c in checks if c.scope == "tenant"] == [("acme", 1)]
    assert Policy.load(settings, stored_tenants=policy.stored_tenants).tenants["beta"].limits.tpm == 10


def test_a_tenant_s_keys_are_listed_by_id_from_every_source() -> None:
    ids = [new_key() for _ in range(3)]
    keys = tuple(Key(id=key_id, tenant=tenant, hash=key_hash)
                 for (_, key_id, key_hash), tenant in zip(ids, ("acme", "globex", "acme"), strict=True))
    p = Policy(Tenancy(keys=keys[:2], tenants={"acme": Tenant(), "globex": Tenant()}), stored=keys[2:])
    assert p.key_ids("acme") == (ids[0][1], ids[2][1]) and p.key_ids("globex") == (ids[1][1],)
    assert p.key_ids("initech") == ()
