"""`[admin]`: its address, and what config.py refuses of it."""

from __future__ import annotations

import msgspec
import pytest

from ingress.admin.settings import Admin, AdminKey, AdminOidc, admin_problem
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Issuer, Redis, Tenancy

_, KEY_ID, KEY_HASH = new_key()
KEYS = (AdminKey(id=KEY_ID, hash=KEY_HASH, role="admin"),)
REDIS = Tenancy(backend="redis", redis=Redis(url="redis://127.0.0.1:6379/0"))
SSO = "https://sso.example.com/realms/acme"
OIDC = AdminOidc(issuer=SSO, audience=("ingress-admin",), admin_values=("ops",))
CALLBACK = "https://admin.example.com/admin/v1/session/oidc/callback"
CALLERS = Tenancy(backend="redis", redis=Redis(url="redis://127.0.0.1:6379/0"), issuers=(
    Issuer(issuer=SSO, audience=("ingress", "ingress-admin"), tenant="acme"),))


@pytest.mark.parametrize(("listen", "address"), [("127.0.0.1:9090", ("127.0.0.1", 9090)), (":9090", ("0.0.0.0", 9090)),
                                                 ("[::1]:9090", ("::1", 9090))])
def test_the_listener_s_address(listen: str, address: tuple[str, int]) -> None:
    assert Admin(listen=listen).address() == address


def test_a_sound_admin_section_passes() -> None:
    assert admin_problem(Admin(listen="127.0.0.1:9090", keys=KEYS), REDIS, ("127.0.0.1", 8080), 4) is None
    assert admin_problem(Admin(listen="127.0.0.1:9090", keys=KEYS), Tenancy(), ("127.0.0.1", 8080), 1) is None
    assert admin_problem(Admin(listen="127.0.0.1:9090", oidc=OIDC), REDIS, ("127.0.0.1", 8080), 4) is None  # no key


@pytest.mark.parametrize(("admin", "tenancy", "workers", "said"), [
    (Admin(listen="127.0.0.1:9090", keys=KEYS), None, 1, "configure [tenancy]"),
    (Admin(listen="127.0.0.1:9090", keys=KEYS), Tenancy(), 0, "each worker would keep keys of its own"),
    (Admin(listen="0.0.0.0:8080", keys=KEYS), REDIS, 1, "is the public listener's"),
    (Admin(listen="127.0.0.1:9090"), REDIS, 1, "no admin key is configured"),
    (Admin(listen="127.0.0.1:9090", keys=KEYS * 2), REDIS, 1, "used twice"),
    (Admin(listen="127.0.0.1:9090", oidc=AdminOidc(issuer=SSO, audience=("a",))), REDIS, 1,
     "admin.oidc: set admin_values and/or viewer_values"),
    (Admin(listen="127.0.0.1:9090", oidc=OIDC), CALLERS, 1,
     "admin.oidc.audience: 'ingress-admin' is tenancy.issuers[0]'s too"),
    (Admin(listen="127.0.0.1:9090", oidc=msgspec.structs.replace(OIDC, client_id="console")), REDIS, 1,
     "admin.oidc.client_id: 'console' is not one of audience"),
    (Admin(listen="127.0.0.1:9090", oidc=msgspec.structs.replace(OIDC, redirect_uri=CALLBACK, scopes=("email",))),
     REDIS, 1, "admin.oidc.scopes: the console's sign-in needs the scope \"openid\""),
])
def test_what_is_refused(admin: Admin, tenancy: Tenancy | None, workers: int, said: str) -> None:
    problem = admin_problem(admin, tenancy, ("127.0.0.1", 8080), workers)
    assert problem is not None and said in problem


def test_the_console_s_client_is_the_first_audience_unless_named() -> None:
    two = msgspec.structs.replace(OIDC, audience=("ingress-admin", "console"), redirect_uri=CALLBACK)
    assert two.client == "ingress-admin" and two.scopes == ("openid", "profile", "email")
    assert msgspec.structs.replace(two, client_id="console").client == "console"
    assert admin_problem(Admin(listen="127.0.0.1:9090", oidc=msgspec.structs.replace(two, client_id="console")),
                         REDIS, ("127.0.0.1", 8080), 1) is None


@pytest.mark.parametrize("changes", [{"redirect_uri": "ftp://x/cb"}, {"redirect_uri": "https://x/cb?next=1"},
                                     {"client_secret_env": "not a name"}, {"scopes": ["openid", "two words"]},
                                     {"scopes": []}, {"session_max": 30}, {"session_max": 86_400}])
def test_the_console_s_sign_in_settings_refused(changes: dict[str, object]) -> None:
    fields = {"issuer": SSO, "audience": ["ingress-admin"], "admin_values": ["ops"], **changes}
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(fields, AdminOidc)
