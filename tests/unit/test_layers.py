"""The folders' one-way promises, read from the imports: `upstream → wire ← translate`, and generated
code reached only through `wire/`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ingress"


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, absolute (`from x import y` counts as x and x.y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def modules_under(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE.parent)): imports_of(p) for p in sorted((PACKAGE / folder).rglob("*.py"))}


def test_generated_code_is_reached_only_through_wire() -> None:
    outside = {
        name: sorted(m for m in imports if m.startswith("ingress.wire._generated"))
        for name, imports in modules_under(".").items()
        if not name.startswith("ingress/wire/")
    }
    assert {name: found for name, found in outside.items() if found} == {}


def test_upstream_does_not_reach_into_translate() -> None:
    # Answers are verified and decoded in wire/; upstream hands bytes to it, translate reads what it decodes.
    offenders = {name: sorted(m for m in imports if m.startswith("ingress.translate"))
                 for name, imports in modules_under("upstream").items()}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_wire_does_not_import_translate_or_upstream() -> None:
    offenders = {name: sorted(m for m in imports if m.startswith(("ingress.translate", "ingress.upstream")))
                 for name, imports in modules_under("wire").items()}
    assert {name: found for name, found in offenders.items() if found} == {}
