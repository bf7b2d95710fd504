"""A real OIDC provider on loopback for the JWT tests: oidc-provider-mock's Flask app (discovery document,
JWKS, authorization-code flow, id tokens signed RS256 with its own key), served by werkzeug in a process of
its own (`python tests/support/oidc_issuer.py PORT`: its warnings and threads stay out of the test's).

Around it, what a test needs to see and steer, as routes this module adds: `/test/hits`, the requests it
served by path (how many JWKS fetches the edge made); `/test/seen`, what the authorization requests'
queries and the token requests' forms (and Authorization headers) held, as a client's PKCE is checked by;
`/test/rotate`, a new provider (a new signing key) at
the same address; `/test/signing-key`, the provider's own key, for the tokens no honest provider signs
(expired, or with a `kid`: this provider's tokens carry none). Its tokens are got as a client gets them: a
user's claims set through its API, the authorization form posted, the code exchanged at the token endpoint.
A port can be chosen before the provider runs: an issuer down when the edge starts.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import jwt

REDIRECT = "http://localhost/callback"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Issuer:
    """The provider at `http://localhost:PORT` (its `iss`: it names itself by the Host it is asked at)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://localhost:{self.port}"

    @contextmanager
    def serving(self) -> Iterator[Issuer]:
        process = subprocess.Popen([sys.executable, "-W", "ignore", __file__, str(self.port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if self._request("GET", "/.well-known/openid-configuration")[0] == 200:
                        break
                except OSError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the OIDC provider did not start: {process.stderr.read()[-2000:]!r}"
                                       if process.stderr else "the OIDC provider did not start")
                time.sleep(0.05)
            yield self
        finally:
            process.terminate()
            process.wait(10)
            if process.stderr is not None:
                process.stderr.close()

    def hits(self) -> Counter[str]:
        return Counter(json.loads(self._request("GET", "/test/hits")[2]))

    def seen(self) -> dict[str, list[dict[str, Any]]]:
        """`authorize`: each authorization request's query; `token`: each token request's form and
        `authorization` header (each parameter's first value)."""
        seen: dict[str, list[dict[str, Any]]] = json.loads(self._request("GET", "/test/seen")[2])
        return seen

    def set_user(self, sub: str, claims: dict[str, Any]) -> None:
        """The claims the provider puts in `sub`'s tokens (its authorization form signs in as `sub`)."""
        status, _, _ = self._request("PUT", f"/users/{urllib.parse.quote(sub)}", json.dumps(claims).encode(),
                                     {"Content-Type": "application/json"})
        assert status == 204, status

    @property
    def jwks_fetches(self) -> int:
        return self.hits()["/jwks"]

    def rotate(self) -> None:
        """A new provider at the same address: a new signing key, its JWKS holding that one alone."""
        assert self._request("POST", "/test/rotate")[0] == 204

    def _request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Host": host or f"localhost:{self.port}", **(headers or {})})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def token(self, sub: str, claims: dict[str, Any] | None = None, *, client_id: str = "ingress",
              host: str | None = None) -> str:
        """An id token for `sub` with `claims`, for the client `client_id` (its `aud`), got through the
        authorization-code flow; asked at `host` (a Host other than localhost's: another `iss`)."""
        self.set_user(sub, claims or {})
        query = urllib.parse.urlencode({"client_id": client_id, "redirect_uri": REDIRECT, "response_type": "code",
                                        "scope": "openid"})
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        status, headers, _ = self._request("POST", f"/oauth2/authorize?{query}",
                                           urllib.parse.urlencode({"sub": sub}).encode(), form, host)
        assert status == 302, status
        code = urllib.parse.parse_qs(urllib.parse.urlparse(headers["Location"]).query)["code"][0]
        status, _, body = self._request("POST", "/oauth2/token", urllib.parse.urlencode({
            "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": client_id,
            "client_secret": "unused"}).encode(), form, host)
        assert status == 200, body
        token: str = json.loads(body)["id_token"]
        return token

    def signing_key(self) -> dict[str, Any]:
        """The provider's private JWK (with its kid, as its JWKS publishes the public half)."""
        status, _, body = self._request("GET", "/test/signing-key")
        assert status == 200
        key: dict[str, Any] = json.loads(body)
        return key

    def public_pem(self) -> bytes:
        """The provider's public key as PEM: what a key-confusion attack uses as an HMAC secret."""
        from cryptography.hazmat.primitives import serialization

        status, _, body = self._request("GET", "/jwks")
        assert status == 200
        public = jwt.PyJWK(json.loads(body)["keys"][0]).key
        return bytes(public.public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo))

    def resigned(self, token: str, *, kid: bool = True, **changes: Any) -> str:
        """`token`'s claims with `changes`, signed again with the provider's own key (and its kid)."""
        claims = {**jwt.decode(token, options={"verify_signature": False}), **changes}
        private = self.signing_key()
        headers = {"kid": private["kid"]} if kid else None
        return jwt.encode(claims, jwt.PyJWK(private, algorithm="RS256").key, algorithm="RS256", headers=headers)


def now() -> int:
    return int(time.time())


def _first(query: str) -> dict[str, str]:
    return {name: values[0] for name, values in urllib.parse.parse_qs(query).items()}


def serve(port: int) -> None:
    """The provider behind a shim that counts requests and can swap the provider for a new one."""
    import flask
    import oidc_provider_mock
    import werkzeug.serving

    def provider() -> flask.Flask:
        app: flask.Flask = oidc_provider_mock.app()

        def signing_key() -> Any:  # the provider's before_request puts its storage on `g`
            return flask.g.oidc_provider_mock_storage.jwk.as_dict(is_private=True)

        app.add_url_rule("/test/signing-key", view_func=signing_key)
        return app

    hits: Counter[str] = Counter()
    seen: dict[str, list[dict[str, Any]]] = {"authorize": [], "token": []}
    current = [provider()]

    def shim(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/test/hits":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(hits).encode()]
        if path == "/test/seen":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(seen).encode()]
        if path == "/oauth2/authorize" and environ.get("REQUEST_METHOD") == "GET":
            seen["authorize"].append(_first(environ.get("QUERY_STRING", "")))
        if path == "/oauth2/token":  # read, then put back for the provider
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            seen["token"].append({"form": _first(body.decode()), "authorization": environ.get("HTTP_AUTHORIZATION")})
        if path == "/test/rotate":
            current[0] = provider()
            start_response("204 No Content", [])
            return []
        hits[path] += 1
        answer: Iterable[bytes] = current[0](environ, start_response)
        return answer

    werkzeug.serving.make_server("127.0.0.1", port, shim, threaded=True).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
