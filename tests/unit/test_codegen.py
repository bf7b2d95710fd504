"""codegen: committed bindings are current and byte-stable; flatc --conform guards schema evolution."""

from __future__ import annotations

import ast
import typing
from importlib import metadata
from pathlib import Path

import pytest

from codegen import bindings as gen
from codegen.emit_enums import emit_enums, wire_name
from codegen.flatc import FlatcError, check_versions, run_flatc
from codegen.schema import SchemaError, parse
from ingress.settings import Route
from ingress.wire import decode, encode
from ingress.wire._generated import enums
from ingress.wire.passport import Passport
from ingress.wire.types import PassportData


def test_committed_bindings_are_current_and_schema_conforms() -> None:
    assert gen.check() == []


def test_generation_is_byte_stable() -> None:
    version = check_versions()
    assert gen._render(version) == gen._render(version)


def test_flatc_matches_the_runtime() -> None:
    assert check_versions() == metadata.version("flatbuffers")


def test_generated_files_say_do_not_modify() -> None:
    files = sorted(gen.GENERATED_DIR.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        head = path.read_text().splitlines()[:2]
        assert head[1] == "# Do not modify: edit the schema and regenerate.", path


def _conform(tmp_path: Path, schema_text: str) -> None:
    candidate = tmp_path / "candidate.fbs"
    candidate.write_text(schema_text)
    run_flatc("--conform", gen.BASELINE, candidate)


def test_appending_a_field_conforms(tmp_path: Path) -> None:
    text = gen.SCHEMA.read_text().replace("  service_tier: string;\n", "  service_tier: string;\n  extra: string;\n")
    assert "extra: string" in text
    _conform(tmp_path, text)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # reordering two fields of the original prefix
        ("  system_prompt: string;", "  user_prompt: string;\n  system_prompt: string;"),
        # changing a field's type
        ("  max_tokens: int32;", "  max_tokens: int64;"),
        # deleting a field
        ("  temperature: float32;", ""),
    ],
    ids=["reorder", "retype", "delete"],
)
def test_incompatible_changes_are_refused(tmp_path: Path, old: str, new: str) -> None:
    text = gen.SCHEMA.read_text()
    assert old in text
    if "user_prompt" in new:  # a reorder: drop the original user_prompt line as well
        text = text.replace("  user_prompt: string;", "", 1)
    with pytest.raises(FlatcError):
        _conform(tmp_path, text.replace(old, new, 1))


# --- our emitters' output reads like hand-written code -----------------------------------------------

OURS = ("encoders.py", "readers.py", "verifier.py", "enums.py")


@pytest.mark.parametrize("name", OURS)
def test_generated_lines_fit_the_line_length(name: str) -> None:
    lines = (gen.GENERATED_DIR / name).read_text().splitlines()
    assert [i for i, line in enumerate(lines, 1) if len(line) > 120] == []


@pytest.mark.parametrize("name", OURS)
def test_no_generated_comment_reads_as_a_type_comment(name: str) -> None:
    # A field called `type` once made `o = e[3]  # type: string`, which mypy reads as an annotation.
    assert [line for line in (gen.GENERATED_DIR / name).read_text().splitlines() if "# type:" in line] == []


@pytest.mark.parametrize("name", OURS)
def test_generated_modules_import_no_other_modules_privates(name: str) -> None:
    tree = ast.parse((gen.GENERATED_DIR / name).read_text())
    privates = [f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names if alias.name.startswith("_")]
    assert privates == []


# --- enums: one source for the names of their values --------------------------------------------------


@pytest.mark.parametrize(("schema_name", "name"), [
    ("System", "system"), ("ToolCalls", "tool_calls"), ("ContentFilter", "content_filter"),
    ("SelfHosted", "self_hosted"), ("OpenAI", "openai"), ("Unset", None),
])
def test_an_enum_value_is_spelled_from_its_schema_name(schema_name: str, name: str | None) -> None:
    assert wire_name(schema_name) == name


def test_the_edge_spells_enums_as_before() -> None:
    # The tables that were hand-copied into wire/decode.py and wire/encode.py, now generated; values
    # appended since (the legacy "function" role, Anthropic's "pause_turn" and "refusal", the "gemini"
    # provider) keep every earlier number.
    assert decode.ROLE_NAMES == ("system", "user", "assistant", "tool", "developer", "function")
    assert decode.FINISH_NAMES == (None, "stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal")
    assert decode.PROVIDER_NAMES == ("openai", "anthropic", "self_hosted", "gemini")
    assert encode.ROLES == {"system": 0, "user": 1, "assistant": 2, "tool": 3, "developer": 4, "function": 5}
    assert encode.FINISH_REASONS == {None: 0, "stop": 1, "length": 2, "tool_calls": 3, "content_filter": 4,
                                     "pause_turn": 5, "refusal": 6}
    assert encode.PROVIDERS == {"openai": 0, "anthropic": 1, "self_hosted": 2, "gemini": 3}


def test_settings_accept_exactly_the_schemas_providers() -> None:
    # settings.py spells the providers as a Literal of its own: it must not drift from the schema.
    assert typing.get_args(typing.get_type_hints(Route)["provider"]) == enums.MODEL_PROVIDER_NAMES


def test_a_new_enum_value_is_one_schema_edit() -> None:
    text = gen.SCHEMA.read_text().replace("Gemini = 3 }", "Gemini = 3, GoogleVertex = 4 }")
    module: dict[str, object] = {}
    exec(emit_enums(parse(text)), module)  # the generated module's text, as `python -m codegen` writes it
    assert module["MODEL_PROVIDER_NAMES"] == ("openai", "anthropic", "self_hosted", "gemini", "google_vertex")
    assert module["MODEL_PROVIDER_VALUES"] == {"openai": 0, "anthropic": 1, "self_hosted": 2, "gemini": 3,
                                               "google_vertex": 4}


def test_enums_with_gaps_are_refused() -> None:
    text = gen.SCHEMA.read_text().replace("Gemini = 3 }", "Gemini = 5 }")
    with pytest.raises(SchemaError, match="without gaps"):
        emit_enums(parse(text))


def test_the_passport_is_the_schemas_table() -> None:
    # No hand-kept mirror with converters: a field added to the Passport table is carried as it is.
    fields = [f.name for f in parse(gen.SCHEMA.read_text()).tables["Passport"].fields if not f.deprecated]
    assert Passport is PassportData
    assert list(Passport.__struct_fields__) == fields
