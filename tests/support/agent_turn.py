"""An agentic coding CLI's first turn (tests/fixtures/anthropic/agent_first_turn.json, ~4,000 tokens: a dozen
tools with long schemas, system blocks with cache_control, adaptive thinking, context_management,
output_config.effort, a system message mid-conversation, metadata.user_id) and the eight `anthropic-beta`
flags such a CLI sends with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic" / "agent_first_turn.json"
BETAS = ["claude-code-20250219", "oauth-2025-04-20", "interleaved-thinking-2025-05-14",
         "fine-grained-tool-streaming-2025-05-14", "context-management-2025-06-27", "context-1m-2025-08-07",
         "effort-2025-11-24", "prompt-caching-scope-2026-01-05"]


def agent_turn(**changes: Any) -> dict[str, Any]:
    """The fixture as an SDK's keyword arguments (its stream helper sets `stream` itself), with `changes`."""
    turn: dict[str, Any] = json.loads(FIXTURE.read_text())
    del turn["stream"]
    return {**turn, **changes}
