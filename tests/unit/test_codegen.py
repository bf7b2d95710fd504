"""codegen: committed bindings are current and byte-stable; flatc --conform guards schema evolution."""

from __future__ import annotations

import ast
from importlib import metadata
from pathlib import Path

import pytest

from codegen import bindings as gen
from codegen.flatc import FlatcError, check_versions, run_flatc


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

OURS = ("encoders.py", "readers.py", "verifier.py")


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
