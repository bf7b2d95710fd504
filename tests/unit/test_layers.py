"""The folders' promise, checked: data flows one way between ingress's packages, the contract (wire)
stands alone, only the layers that do I/O are async, and only ingress/tasks.py spawns tasks. Read from the
source with `ast`, so a new import or spawn that breaks it fails here; and wire imported in a fresh
interpreter, so that an import made at run time shows too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "ingress"
GENERATED = ROOT / "wire" / "_generated"

# The stages that do no I/O: plain functions on bytes and structs, testable without an event loop.
SYNC = ("oai", "anthropic", "gemini", "encoding", "wire", "translate", "routing", "tokens", "exchange", "usage",
        "errors", "settings", "config", "metrics", "log", "guardrails", "tracing")
# In bridges/ only the service does I/O: a dialect is pure (ingress/bridges/dialect.py).
IO_MODULES = {"bridges": {"service.py"}}
# Pure modules inside packages that do I/O: the GC's tuning beside the lifecycle, the app's typed keys in the edge,
# the folding of late system messages among the stages.
SYNC_MODULES = {"serve": {"gctune.py"}, "edge": {"appkeys.py"}, "pipeline": {"turns.py"},
                "admin": {"settings.py", "records.py", "openapi.py"},  # what a change makes, and the descriptions
                "state": {"record.py", "settings.py", "conversation.py"}}  # the codecs and settings: sans-I/O
# Every package and top-level module of ingress/, as _unit names them.
UNITS = frozenset(p.stem if p.suffix == ".py" else p.name for p in ROOT.iterdir()
                  if p.suffix == ".py" or (p / "__init__.py").exists())
# What each package may import from the others (top-level modules are their own "package").
FORBIDDEN = {
    "upstream": {"translate", "edge", "pipeline", "oai", "encoding"},  # upstream → wire ← translate
    "translate": {"upstream", "edge", "pipeline", "encoding"},
    # The contract stands alone: a service that imports it gets none of the edge's dialects (oai, anthropic, gemini),
    # token counting or encoding of requests, nor anything added later; errors' tree is the one exception.
    "wire": UNITS - {"wire", "errors"},
    # The edge's requests in the contract's terms: the dialects' types and tokens' counts onto wire's tables;
    # nothing of the hop, the stages or the policies.
    "encoding": {"upstream", "translate", "edge", "pipeline", "routing", "serve", "bridges", "demo", "tenancy",
                 "guardrails", "cache"},
    "oai": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "anthropic", "gemini"},
    # Anthropic's API as oai is OpenAI's; its requests become chat requests (oai's) on their way in.
    "anthropic": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "gemini"},
    # Google's Gemini API likewise: a dialect beside Anthropic's, knowing nothing of it.
    "gemini": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "anthropic"},
    "routing": {"upstream", "translate", "edge", "pipeline", "wire", "encoding", "oai"},
    "pipeline": {"edge", "serve"},
    "demo": {"edge", "pipeline", "upstream", "translate", "serve", "encoding"},  # a service reads the contract alone
    "bridges": {"edge", "pipeline", "translate", "serve", "routing", "demo"},  # a service like any other
    # Stored responses: records of the Responses API's answers (oai's types), kept in memory or through the
    # tenancy's RESP client; nothing of the hop, the stages that call it or the edge.
    "state": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "routing", "serve", "bridges", "demo",
              "cache", "anthropic", "gemini"},
    # The admin API: the tenancy's keys changed and followed, on a listener of its own; nothing of the requests it
    # admits nor of the edge that serves them (serve wires the two together). It stores guardrails' settings and
    # checks them as check-config does (ingress.guardrails' check_guardrails) before a replica gets them.
    "admin": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "routing", "serve", "bridges", "demo",
              "cache", "state", "oai", "anthropic", "gemini"},
    # A policy on decoded requests: it reads oai's types and raises errors', nothing of the hop.
    "guardrails": {"wire", "encoding", "upstream", "translate", "edge", "pipeline", "routing", "settings", "config",
                   "serve"},
}


def _modules() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if GENERATED not in p.parents]


def _unit(path: Path) -> str:
    """The package a module belongs to: `edge` for ingress/edge/endpoints.py, `pipeline` for pipeline.py."""
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """The ingress modules `path` imports, as dotted names below `ingress.`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n.removeprefix("ingress.") for n in names if n.startswith("ingress.")}


def _imported_units(path: Path) -> set[str]:
    units = set()
    for name in _imports(path):
        first = name.split(".")[0]
        if (ROOT / first).is_dir() or (ROOT / f"{first}.py").exists():
            units.add(first)
    return units - {_unit(path)}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _modules():
        graph.setdefault(_unit(path), set()).update(_imported_units(path))
    return graph


def test_no_import_cycle_among_the_packages() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(unit: str, path: list[str]) -> None:
        state[unit] = 1
        for nxt in sorted(graph.get(unit, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " → ".join([*path[path.index(nxt):], nxt]))
            if nxt not in state:
                walk(nxt, [*path, nxt])
        state[unit] = 2

    for unit in sorted(graph):
        if unit not in state:
            walk(unit, [unit])


@pytest.mark.parametrize("unit", sorted(FORBIDDEN))
def test_data_flows_one_way(unit: str) -> None:
    assert _graph().get(unit, set()) & FORBIDDEN[unit] == set()


def test_the_contract_loads_alone_in_a_fresh_interpreter() -> None:
    """`import ingress.wire`, as a service does it: only wire's modules and errors load, none of oai's,
    anthropic's, tokens' or encoding's (an import inside a function, or one ast cannot see, would show here)."""
    code = "import sys, ingress.wire; print(*sorted(m for m in sys.modules if m.startswith('ingress.')))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True,
                            check=True).stdout.split()
    assert "ingress.wire" in loaded
    assert [m for m in loaded if m.split(".")[1] not in ("wire", "errors")] == []


def test_only_the_edge_imports_the_edge() -> None:
    importers = {u for u, deps in _graph().items() if "edge" in deps}
    assert importers <= {"serve"}  # the lifecycle serves it


def test_generated_code_is_reached_only_through_wire() -> None:
    outside = [str(p.relative_to(ROOT)) for p in _modules()
               if _unit(p) != "wire" and any(n.startswith("wire._generated") for n in _imports(p))]
    assert outside == []


def _sync(p: Path) -> bool:
    return (_unit(p) in SYNC or (_unit(p) in IO_MODULES and p.name not in IO_MODULES[_unit(p)])
            or p.name in SYNC_MODULES.get(_unit(p), ()))


@pytest.mark.parametrize("path", [p for p in _modules() if _sync(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_stages_without_io_are_not_async(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]


def test_sse_bytes_are_made_only_in_the_edge() -> None:
    makers = [str(p.relative_to(ROOT)) for p in _modules() if b'b"data: ' in p.read_bytes()]
    assert makers == ["edge/sse.py"]


def _spawns(path: Path) -> list[str]:
    """Where `path` spawns a task by a method call, `loop.create_task(...)` or the like: ruff's banned-api
    (pyproject.toml) bans `asyncio.create_task` by its import path and cannot see a method of a loop."""
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("create_task", "ensure_future")]


def test_tasks_are_spawned_only_in_tasks_py() -> None:
    """ingress/tasks.py keeps a reference to every task and drains them; a task spawned elsewhere is not."""
    assert [s for p in _modules() if p != ROOT / "tasks.py" for s in _spawns(p)] == []


MAX_LINES = 400  # a module longer than this does two jobs; _generated/ is flatc's and codegen's


def test_no_module_is_longer_than_a_screenful_of_screens() -> None:
    long = {path.relative_to(ROOT).as_posix(): lines for path in ROOT.rglob("*.py")
            if "_generated" not in path.parts and (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long
