"""The admin API: keys made, changed, rotated and revoked while the edge serves, and who did it.

    settings.py  `[admin]`: its own listener and its credentials (admin keys, each `admin` or `viewer`; `[admin.oidc]`)
    records.py   a stored key, the API's request bodies, an audit entry: what each change makes (no I/O)
    keystore.py  where the keys and the audit log live: the tenancy's Redis/Valkey (one script a change:
                 the key, the version counter and the audit entry together), or one process's memory
    sync.py      every replica polls the version counter and installs the stored keys when it moved
    api.py       `/admin/v1/...` on aiohttp, behind the admin credentials; openapi.py its description;
                 tenants.py the tenants' routes; imports.py the keys file copied into the store
    oidc.py      admins signed in with an OIDC provider: their tokens verified as the data plane's, a claim's role
    session.py   the console's sign-in: an admin key exchanged for a session cookie, a CSRF token per change
    console.py   the console's page, script and style (console/), at /admin/, and the listener's headers
    spend.py     `/admin/v1/spend`: the spend ledger (ingress/tenancy/ledger.py) by day or hour, JSON or CSV

Secrets are never stored nor logged: a key's SHA-256 (keys.py's) is what the store holds, and the secret is
shown once, in the answer that made it.
"""
