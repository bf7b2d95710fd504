"""The admin API's description: OpenAPI 3.1, its bodies' schemas msgspec's own."""

from __future__ import annotations

import json

from ingress.admin.openapi import DESCRIPTION


def test_the_description_is_json_and_its_references_resolve() -> None:
    text = json.dumps(DESCRIPTION)
    schemas = DESCRIPTION["components"]["schemas"]
    assert {"NewKey", "KeyUpdate", "Rotation", "AuditEntry", "KeyShown", "Error"} <= set(schemas)
    refs = {part.split('"')[0] for part in text.split('"#/components/schemas/')[1:]}
    assert refs <= set(schemas)
    assert "tenant" in schemas["NewKey"]["required"]
