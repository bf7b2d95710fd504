"""Unit tests mirror the code by path, checked both ways (mitmproxy's filename_matching): every module under
ingress/ and codegen/ has its test file at tests/unit/<package>/test_<module>.py, and every such test file
names a module or package at that path; the exceptions are listed below, each with its reason.

The mirror drops `ingress/` (ingress/wire/answer.py → tests/unit/wire/test_answer.py, ingress/usage.py →
tests/unit/test_usage.py) and keeps `codegen/` (codegen/schema.py → tests/unit/codegen/test_schema.py). A
package is tested at its parent's level (ingress/tokens/ → tests/unit/test_tokens.py); one whose
__init__.py defines no function or class only gathers its modules and needs no test file of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "tests" / "unit"

# Unit test files of something other than one module or package, and why (paths under tests/unit/).
CROSS_CUTTING = {
    "test_article_schema.py": "the original LLMGateway schema's readers (tests/fixtures/) read our requests",
    "test_bench_lib.py": "bench/lib/: the benchmarks' shared servers, rounds and tables",
    "test_deploy.py": "deploy/: the manifests, the chart and the Dockerfile",
    "test_docs.py": "the README's and deploy/ingress.toml's examples",
    "test_golden_buffers.py": "the released schema versions (schema/baseline/): their buffers, read through wire/",
    "test_layers.py": "the import graph of ingress/'s packages, which of them may be async, where tasks spawn",
    "test_oracle.py": "tests/support/cxx_oracle.py, the FlatBuffers C++ Verifier the other tests consult",
}

_CODEGEN = "tested with its package in tests/unit/test_codegen.py: the committed bindings regenerate byte for byte"
_EDGE = "tested with its package over HTTP in tests/unit/test_edge.py"
_PIPELINE = "a stage of the request path, exercised end to end"

# Modules without a test file at their mirrored path, and where they are tested instead.
NO_TEST_FILE = {
    "codegen/__main__.py": "the command line over bindings.check/generate: " + _CODEGEN,
    "codegen/bindings.py": _CODEGEN,
    "codegen/emit.py": _CODEGEN,
    "codegen/emit_enums.py": _CODEGEN,
    "codegen/emit_reader.py": _CODEGEN,
    "codegen/emit_slots.py": _CODEGEN,
    "codegen/emit_verifier.py": _CODEGEN,
    "codegen/flatc.py": "tested in tests/unit/test_codegen.py (the pinned flatc, --conform)",
    "ingress/__main__.py": "tested in tests/unit/test_config.py (the CLI's config errors); "
                           "serve and bridge run in tests/integration/test_workers.py",
    "ingress/anthropic/blocks.py": "declarations only (msgspec Structs), read in tests/unit/anthropic/test_messages.py",
    "ingress/anthropic/models.py": "declarations only (msgspec Structs)",
    "ingress/bridges/__init__.py": "the dialects by name: tested in tests/unit/bridges/test_anthropic.py",
    "ingress/bridges/dialect.py": "the dialect interface: tested through each dialect in tests/unit/bridges/",
    "ingress/bridges/service.py": "exercised end to end in tests/integration/test_bridge_service.py",
    "ingress/cache/__init__.py": "tested in tests/unit/cache/test_flight.py; "
                                 "end to end in tests/integration/test_response_cache.py",
    "ingress/cache/settings.py": "declarations only",
    "ingress/demo/service.py": "exercised end to end in tests/integration/test_sidecar.py",
    "ingress/demo/text.py": "exercised end to end in tests/integration/test_openai_sdk_completions.py",
    "ingress/edge/appkeys.py": "declarations only",
    "ingress/edge/connections.py": "exercised end to end in tests/integration/test_hostile_clients.py",
    "ingress/edge/messages.py": "exercised end to end in tests/integration/test_anthropic_sdk.py",
    "ingress/edge/operational.py": "exercised end to end in tests/integration/test_operability.py",
    "ingress/edge/spans.py": "exercised end to end in tests/integration/test_tracing.py",
    "ingress/edge/writers.py": "exercised end to end in tests/integration/test_sse_framing.py",
    "ingress/metrics/exposition.py": "tested with its package in tests/unit/test_metrics.py",
    "ingress/metrics/families.py": "declarations only",
    "ingress/metrics/folding.py": "tested with its package in tests/unit/test_metrics.py",
    "ingress/metrics/gcpauses.py": "tested with its package in tests/unit/test_metrics.py",
    "ingress/metrics/histogram.py": "tested with its package in tests/unit/test_metrics.py",
    "ingress/oai/chat_answers.py": "declarations only",
    "ingress/oai/responses_answers.py": "declarations only",
    "ingress/pipeline/answer.py": _PIPELINE + " in tests/integration/test_openai_sdk_answers.py",
    "ingress/pipeline/cache.py": "tested in tests/unit/cache/test_flight.py; "
                                 "end to end in tests/integration/test_response_cache.py",
    "ingress/pipeline/prepare_messages.py": _PIPELINE + " in tests/integration/test_anthropic_sdk.py",
    "ingress/serve/app.py": "the app every HTTP test serves: tests/unit/test_edge.py, tests/integration/",
    "ingress/serve/server.py": "exercised end to end in tests/integration/test_workers.py",
    "ingress/settings.py": "tested in tests/unit/test_config.py",
    "ingress/sockets.py": "exercised through its callers in tests/unit/upstream/test_http1.py and "
                          "tests/integration/test_slow_readers.py",
    "ingress/tenancy/__init__.py": "exercised end to end in tests/integration/test_tenancy.py",
    "ingress/tenancy/settings.py": "declarations only",
    "ingress/wire/__init__.py": "the contract's readers: round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/answer.py": "tested in tests/property/test_common_response.py and "
                              "tests/unit/translate/test_completion.py",
    "ingress/wire/convert.py": "tested in tests/property/test_cache_convert.py",
    "ingress/wire/decode.py": "round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/encode.py": "round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/framing.py": "tested in tests/property/test_splitting.py",
    "ingress/wire/identifiers.py": "declarations only (file identifiers and service paths)",
    "ingress/wire/types.py": "declarations only",
    "ingress/wire/verifier_runtime.py": "tested in tests/unit/wire/test_verify.py",
}


def _defines_something(init: Path) -> bool:
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               for node in ast.parse(init.read_text()).body)


def _modules() -> list[str]:
    """Every module under ingress/ (bar _generated/) and codegen/ that wants a test file: an __init__.py
    stands for its package, and counts only when it defines a function or class."""
    found = []
    for root in ("ingress", "codegen"):
        for path in sorted((REPO / root).rglob("*.py")):
            relative = path.relative_to(REPO)
            if "_generated" in relative.parts or "__pycache__" in relative.parts:
                continue
            if path.name == "__init__.py" and not _defines_something(path):
                continue
            found.append(relative.as_posix())
    return found


def mirrored(module: str) -> str:
    """The test file's path for a module's: ingress/wire/answer.py → tests/unit/wire/test_answer.py."""
    parts = module.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "ingress" and len(parts) > 1:
        parts.pop(0)
    return "/".join(["tests", "unit", *parts[:-1], f"test_{parts[-1]}.py"])


def _sources(test: Path) -> list[Path]:
    """What a test file at `test` may be named after: a module, or a package, at the mirrored path."""
    relative = test.relative_to(UNIT)
    folder, name = relative.parent.parts, relative.stem.removeprefix("test_")
    if not folder and name in ("ingress", "codegen"):
        return [REPO / name / "__init__.py"]
    roots = [REPO / "ingress"] + ([REPO] if folder[:1] == ("codegen",) else [])
    return [root.joinpath(*folder, *candidate) for root in roots
            for candidate in ((f"{name}.py",), (name, "__init__.py"))]


def test_every_unit_test_file_names_a_module_at_its_path() -> None:
    unmatched = sorted(test.relative_to(UNIT).as_posix() for test in UNIT.rglob("test_*.py")
                       if test.relative_to(UNIT).as_posix() not in CROSS_CUTTING
                       and not any(source.exists() for source in _sources(test)))
    assert unmatched == [], (
        f"{unmatched} in tests/unit/ name no module at their path: move each to tests/unit/<package>/"
        "test_<module>.py after the module it tests, or add it to CROSS_CUTTING with the reason")


def test_every_module_has_its_test_file() -> None:
    missing = [f"{module} → {mirrored(module)}" for module in _modules()
               if module not in NO_TEST_FILE and not (REPO / mirrored(module)).exists()]
    assert missing == [], (
        f"no test file at the mirrored path of {missing}: write it, or add the module to NO_TEST_FILE with the "
        "place where it is tested")


def test_every_exception_is_still_needed() -> None:
    modules = set(_modules())
    stale = sorted(name for name in CROSS_CUTTING
                   if not (UNIT / name).exists() or any(source.exists() for source in _sources(UNIT / name)))
    stale += sorted(module for module in NO_TEST_FILE
                    if module not in modules or (REPO / mirrored(module)).exists())
    assert stale == [], f"listed as exceptions but missing, or now matched by path: {stale}"


def test_every_reason_names_files_that_exist() -> None:
    named = {path for reason in NO_TEST_FILE.values() for path in re.findall(r"tests/[\w/]+(?:\.py|/)", reason)}
    assert sorted(path for path in named if not (REPO / path).exists()) == []
