"""Anthropic's `GET /v1/models` answers: a model, and a page of them."""

from __future__ import annotations

from typing import Literal

import msgspec


class ModelInfo(msgspec.Struct, kw_only=True):
    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: str  # RFC 3339


class ModelPage(msgspec.Struct, kw_only=True):
    data: list[ModelInfo]
    has_more: bool = False
    first_id: str | None
    last_id: str | None


def model_page(models: list[str], created_at: str) -> ModelPage:
    """Every model in one page (the edge lists the few its routes name)."""
    data = [ModelInfo(id=m, display_name=m, created_at=created_at) for m in models]
    return ModelPage(data=data, first_id=models[0] if models else None, last_id=models[-1] if models else None)
