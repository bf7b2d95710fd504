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
_DECLARES = "declarations only"
_SERVER = "only meaningful against a real server, exercised end to end in "
_METRICS = ("tested with its package in tests/unit/test_metrics.py, through the families it renders and the "
            "registry it folds across workers")

# Modules without a test file at their mirrored path, and where they are tested instead: modules that only
# declare; codegen tested by regenerating the bindings; modules whose tests are property tests; and those
# whose work only shows through a real server (aiohttp's request handling, worker processes, sockets).
NO_TEST_FILE = {
    # codegen: the committed bindings regenerate byte for byte
    "codegen/__main__.py": "the command line over bindings.check/generate: " + _CODEGEN,
    "codegen/bindings.py": _CODEGEN,
    "codegen/emit.py": _CODEGEN,
    "codegen/emit_enums.py": _CODEGEN,
    "codegen/emit_reader.py": _CODEGEN,
    "codegen/emit_slots.py": _CODEGEN,
    "codegen/emit_verifier.py": _CODEGEN,
    "codegen/flatc.py": "tested in tests/unit/test_codegen.py (the pinned flatc, --conform)",
    "ingress/wire/verifier_runtime.py": "the generated verifier's runtime, tested with it in "
                                        "tests/unit/wire/test_verify.py",
    # declarations only
    "ingress/anthropic/blocks.py": _DECLARES + " (msgspec Structs), read in tests/unit/anthropic/test_messages.py",
    "ingress/anthropic/models.py": _DECLARES + " (msgspec Structs)",
    "ingress/cache/settings.py": _DECLARES,
    "ingress/edge/appkeys.py": _DECLARES,
    "ingress/metrics/families.py": _DECLARES,
    "ingress/oai/chat_answers.py": _DECLARES,
    "ingress/oai/responses_answers.py": _DECLARES,
    "ingress/settings.py": "the configuration's Structs, and their resolved() and worker_count: parsed, resolved "
                           "and refused in tests/unit/test_config.py",
    "ingress/tenancy/settings.py": _DECLARES,
    "ingress/wire/identifiers.py": _DECLARES + " (file identifiers and service paths)",
    "ingress/wire/types.py": _DECLARES,
    # property tests
    "ingress/wire/__init__.py": "the contract's readers: round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/answer.py": "tested in tests/property/test_common_response.py (and through the translation in "
                              "tests/unit/translate/test_completion.py)",
    "ingress/wire/convert.py": "tested in tests/property/test_cache_convert.py",
    "ingress/wire/decode.py": "round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/encode.py": "round-tripped in tests/property/test_roundtrip.py",
    "ingress/wire/framing.py": "tested in tests/property/test_splitting.py",
    # a real server
    "ingress/__main__.py": "the CLI's config errors in tests/unit/test_config.py; serve and bridge start "
                           "worker processes: " + _SERVER + "tests/integration/test_workers.py",
    "ingress/bridges/service.py": "the bridge's aiohttp service: " + _SERVER
                                  + "tests/integration/test_bridge_service.py",
    "ingress/demo/service.py": "the demo service's aiohttp app: " + _SERVER + "tests/integration/test_sidecar.py",
    "ingress/edge/connections.py": "aiohttp's RequestHandler and the listener: " + _SERVER
                                   + "tests/integration/test_hostile_clients.py",
    "ingress/edge/operational.py": "liveness, readiness and /metrics of a running app: " + _SERVER
                                   + "tests/integration/test_operability.py",
    "ingress/edge/spans.py": "a server span ended from a served request: " + _SERVER
                             + "tests/integration/test_tracing.py",
    "ingress/edge/writers.py": "writes to a live response within the client's write timeout: " + _SERVER
                               + "tests/integration/test_sse_framing.py",
    "ingress/serve/app.py": "the app itself: every HTTP test serves it (tests/unit/test_edge.py, tests/integration/)",
    "ingress/serve/server.py": "the worker processes and their sockets: " + _SERVER
                               + "tests/integration/test_workers.py",
    # not yet unit-tested at their own path: each named where it is tested today
    "ingress/cache/__init__.py": "tested in tests/unit/cache/test_flight.py; "
                                 "end to end in tests/integration/test_response_cache.py",
    "ingress/demo/text.py": "exercised end to end in tests/integration/test_openai_sdk_completions.py",
    "ingress/edge/messages.py": "the Messages endpoints: exercised end to end in "
                                "tests/integration/test_anthropic_sdk.py",
    "ingress/metrics/exposition.py": _METRICS,
    "ingress/metrics/folding.py": _METRICS,
    "ingress/metrics/gcpauses.py": _METRICS,
    "ingress/metrics/histogram.py": _METRICS,
    "ingress/pipeline/answer.py": "a stage of the request path, exercised end to end in "
                                  "tests/integration/test_openai_sdk_answers.py",
    "ingress/pipeline/cache.py": "tested in tests/unit/cache/test_flight.py; "
                                 "end to end in tests/integration/test_response_cache.py",
    "ingress/pipeline/prepare_messages.py": "a stage of the request path, exercised end to end in "
                                            "tests/integration/test_anthropic_sdk.py",
    "ingress/pipeline/stream_dialects.py": "a stage of the request path, exercised end to end in "
                                           "tests/integration/test_anthropic_sdk.py, test_gemini_sdk.py and "
                                           "test_openai_sdk_responses.py",
    "ingress/tenancy/__init__.py": "built by the pipeline's tests (tests/support/gateways.py); "
                                   "end to end in tests/integration/test_tenancy.py",
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
