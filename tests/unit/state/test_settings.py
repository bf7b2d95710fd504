"""The `[responses]` section (ingress/state/settings.py): `auto` follows the tenancy's Redis."""

from __future__ import annotations

import msgspec
import pytest

from ingress.state.settings import ResponsesSettings


def test_auto_is_redis_when_the_tenancy_names_one() -> None:
    assert ResponsesSettings().chosen(has_redis=True) == "redis"
    assert ResponsesSettings().chosen(has_redis=False) == "memory"
    assert ResponsesSettings(backend="memory").chosen(has_redis=True) == "memory"
    assert ResponsesSettings(backend="off").chosen(has_redis=True) == "off"


def test_the_defaults_are_openai_s_retention_and_a_key_s_scope() -> None:
    settings = ResponsesSettings()
    assert settings.retention == 30 * 86_400 and settings.scope == "key"


@pytest.mark.parametrize("field", [{"retention": 0}, {"memory_bytes": 10}, {"max_record_bytes": 1}, {"scope": "all"},
                                   {"unknown": 1}])
def test_bad_values_are_refused(field: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(field, ResponsesSettings)
