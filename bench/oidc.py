"""What a caller authenticated by a JWT costs against one with a key: the authentication in process, and a
whole request's CPU in the edge's process, side by side in one run.

    nice -n 10 .venv/bin/python -m bench oidc [--quick]   -> results/oidc.json (~1 min; --quick ~20 s,
                                                              results/oidc-quick.json)

1. In process, on the thread's CPU clock (GC off inside each loop; variants interleaved in a fresh random
   order each round; the figure is each one's median over rounds, and its difference from the key's within
   each round): `Policy.authenticate` for (a) a key `sk-ig-...` (its SHA-256 and a constant-time compare);
   (b) the same JWT every call, as an agent sends its token with every request for an hour (verified once,
   then remembered by its SHA-256: bearer.py); (c) an RS256 JWT verified every call (the verifier's memory
   emptied before each: the signature with the issuer's 2048-bit key, exp/nbf/iss/aud, the claims mapped to
   a tenant, subject and plan); (d) the same with ES256 (P-256). The keys are the issuer's, already fetched.

2. The edge's CPU per request: one `ingress serve --workers 1` with the demo service embedded, [tenancy] in
   memory with a key and an OIDC issuer (tests/support/oidc_issuer.py: the real provider the tests use, its
   own process), no limit that refuses. One keep-alive connection sends a small chat request N times per
   variant per round (variants alternated, each first in turn): (a) the key; (b) one RS256 id token of the
   provider; (c) a new token each request (the provider's claims, signed with its key and kid beforehand).
   CPU from /proc for the edge's process tree, per request; the difference from the key's within each round.

The machine's two cores are shared: only figures of the same run are compared.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
MODEL = "ingress-demo"
ISSUER = "https://sso.example.com/realms/bench"


def _policy_cases() -> dict[str, Any]:
    """Each variant of part 1 as one call of Policy.authenticate."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    from ingress.tenancy.bearer import KeySet
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.policy import Policy
    from ingress.tenancy.settings import Claims, Issuer, Key, Limits, Tenancy, Tenant

    key, key_id, key_hash = new_key()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    policy = Policy(Tenancy(
        keys=(Key(id=key_id, tenant="acme", hash=key_hash, limits=Limits(rpm=600)),), tenants={"acme": Tenant()},
        issuers=(Issuer(issuer=ISSUER, audience=("ingress",), algorithms=("RS256", "ES256"), limits=Limits(rpm=600),
                        claims=Claims(tenant="org_id", team="groups", plan="plan"), plans={"team": Limits()}),)))
    verifier = policy.verifier
    assert verifier is not None
    verifier.set_keys(ISSUER, KeySet({"keys": [
        {**RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True), "kid": "r1", "alg": "RS256", "use": "sig"},
        {**ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": "e1", "alg": "ES256", "use": "sig"}]}))
    # An id token as a provider fills it: ~900 bytes as RS256, like Keycloak's or Okta's
    claims = {"iss": ISSUER, "aud": ["ingress"], "sub": "f3b1c0de-1111-2222-3333-444455556666",
              "exp": int(time.time()) + 3600, "iat": int(time.time()), "auth_time": int(time.time()),
              "org_id": "acme", "groups": ["/eng", "/ops"], "plan": "team", "email": "alice@example.com",
              "name": "Alice Example", "preferred_username": "alice", "at_hash": "GquEus9lzZrFcBj0SJUV6A"}
    rs = {"Authorization": "Bearer " + jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "r1"})}
    es = {"Authorization": "Bearer " + jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "e1"})}
    by_key = {"Authorization": f"Bearer {key}"}
    forget = verifier._verified.clear  # what a token not seen before costs: verified, not remembered

    def verified(headers: dict[str, str]) -> Any:
        def call() -> object:
            forget()
            return policy.authenticate(headers)
        return call

    assert policy.authenticate(rs).id == policy.authenticate(es).id == f"oidc:{claims['sub']}"
    return {"key": lambda: policy.authenticate(by_key), "JWT remembered": lambda: policy.authenticate(rs),
            "JWT RS256 verified": verified(rs), "JWT ES256 verified": verified(es),
            "_token_bytes": len(rs["Authorization"])}


def part1(rounds: int, budget: float) -> dict[str, Any]:
    from bench.lib.budget import cpu_us
    from bench.lib.rounds import Rounds

    cases = _policy_cases()
    token_bytes = cases.pop("_token_bytes")
    names = list(cases)
    timed = Rounds(names, rounds, order="shuffle", baseline="key").collect(
        lambda name: {"us": cpu_us(cases[name], budget, repeats=3)})
    return {"token_bytes": token_bytes, "variants": {
        name: {"us": timed.median(name, "us"), "runs": timed.values(name, "us"),
               "added_us": None if name == "key" else timed.added(name, "us").median,
               "added_range": None if name == "key" else timed.added(name, "us").range(2)} for name in names}}


def _post(conn: http.client.HTTPConnection, body: bytes, auth: str) -> int:
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json", "Authorization": auth})
    response = conn.getresponse()
    response.read()
    return response.status


def part2(rounds: int, per_round: int, work: Path) -> dict[str, Any]:
    import jwt
    from oidc_issuer import Issuer

    from bench.lib.procs import cpu_seconds
    from bench.lib.rounds import Rounds
    from bench.lib.servers import Server, free_port, serving
    from ingress.tenancy.keys import new_key

    key, key_id, key_hash = new_key()
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the edge"}],
                       "max_tokens": 16}).encode()
    with Issuer().serving() as issuer:
        port = free_port()
        config = work / "edge.toml"
        config.write_text(f'port = {port}\nworkers = 1\nmodels = ["{MODEL}"]\n\n[tenancy]\nbackend = "memory"\n'
                          f'[tenancy.tenants.acme]\n[[tenancy.keys]]\nid = "{key_id}"\ntenant = "acme"\n'
                          f'hash = "{key_hash}"\n[[tenancy.issuers]]\nissuer = "{issuer.url}"\n'
                          f'audience = ["ingress"]\nclaims = {{ tenant = "org_id", team = "groups" }}\n')
        token = issuer.token("alice", {"org_id": "acme", "groups": ["eng"]})
        claims = jwt.decode(token, options={"verify_signature": False})
        private = issuer.signing_key()
        signer = jwt.PyJWK(private, algorithm="RS256").key
        fresh = iter([jwt.encode({**claims, "jti": str(i)}, signer, algorithm="RS256", headers={"kid": private["kid"]})
                      for i in range(rounds * per_round + per_round + 10)])
        auth = {"key": lambda: f"Bearer {key}", "JWT, one token": lambda: f"Bearer {token}",
                "JWT, a new token each request": lambda: f"Bearer {next(fresh)}"}
        edge = Server("edge", [sys.executable, "-m", "ingress", "serve", "--config", str(config), "--workers", "1"],
                      port, work / "edge.log")
        with serving(edge):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            for make in auth.values():  # each works (and the issuer's keys are fetched)
                for _ in range(20):
                    status = _post(conn, body, make())
                    if status != 200:
                        raise RuntimeError(f"the edge answered {status}; see {edge.log}")

            def measure(name: str) -> dict[str, float]:
                headers = [auth[name]() for _ in range(per_round)]
                before = sum(cpu_seconds(edge.pid))
                for h in headers:
                    _post(conn, body, h)
                return {"us": (sum(cpu_seconds(edge.pid)) - before) / per_round * 1e6}

            measured = Rounds(list(auth), rounds, order="rotate", baseline="key").collect(measure)
            conn.close()
    return {name: {"us": measured.median(name, "us"), "runs": measured.values(name, "us"),
                   "added_us": None if name == "key" else measured.added(name, "us").median,
                   "added_range": None if name == "key" else measured.added(name, "us").range(1)} for name in auth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=2000, help="per variant per round, part 2")
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter loops, fewer requests")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from bench.lib.provenance import code_version, describe
    from bench.lib.results import niced, result_path, write_result
    from bench.lib.tables import Table
    from ingress import log

    niced()
    log.configure("warning", open(os.devnull, "w"))  # noqa: SIM115 - the process's log stream, for its lifetime
    rounds, budget, requests = (3, 0.05, 300) if args.quick else (args.rounds, 0.2, args.requests)
    started = time.monotonic()
    first = part1(rounds, budget)
    with tempfile.TemporaryDirectory(prefix="bench-oidc-") as work:
        second = part2(rounds, requests, Path(work))
    print(describe(code_version()))
    print(f"\n1. Policy.authenticate, thread CPU µs per call ({rounds} rounds; an RS256 id token of "
          f"{first['token_bytes']} bytes)")
    table = Table(("caller", "<24"), ("µs", ">9.2f"), ("added to a key's (range)", ">30"))
    print(table.header())
    for name, row in first["variants"].items():
        print(table.row(name, row["us"], "" if row["added_us"] is None else
                        f"{row['added_us']:+.2f}  ({row['added_range']})"))
    print(f"\n2. The edge's CPU µs per request (its process tree, /proc), {requests} chat requests per variant "
          f"per round, {rounds} rounds, one keep-alive connection, demo service embedded")
    table = Table(("caller", "<32"), ("µs", ">9.1f"), ("added to a key's (range)", ">30"))
    print(table.header())
    for name, row in second.items():
        print(table.row(name, row["us"], "" if row["added_us"] is None else
                        f"{row['added_us']:+.1f}  ({row['added_range']})"))
    write_result({"code": code_version(), "meta": {"rounds": rounds, "requests": requests,
                                                   "wall_s": time.monotonic() - started},
                  "authenticate": first, "request": second}, result_path("oidc", args.quick, args.out))


if __name__ == "__main__":
    main()
