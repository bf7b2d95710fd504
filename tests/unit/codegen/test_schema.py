"""codegen's reading of the schema agrees with flatc's: slots, scalar types, defaults, struct layout.

flatc's own reading is taken from the Python readers it generated (ingress/wire/_generated/): each
accessor names its vtable offset, its scalar flags and its default. The encoders and the verifier are
emitted from codegen's IR, so this is where the two readings must meet.
"""

from __future__ import annotations

import re

import pytest

from codegen import bindings
from codegen.schema import SCALARS, Field, Table, parse
from ingress.wire import identifiers

SCHEMA = parse(bindings.SCHEMA.read_text())
GENERATED = bindings.GENERATED_DIR / bindings.NAMESPACE

FLAGS = {  # flatbuffers.number_types flags → the scalar size and struct format they read
    "Bool": ("?", 1), "Int8": ("b", 1), "Uint8": ("B", 1), "Int16": ("h", 2), "Uint16": ("H", 2),
    "Int32": ("i", 4), "Uint32": ("I", 4), "Int64": ("q", 8), "Uint64": ("Q", 8),
    "Float32": ("f", 4), "Float64": ("d", 8),
}
_ACCESSOR = re.compile(
    r"    def (?P<name>\w+)\(self\):\n"
    r"        o = flatbuffers\.number_types\.UOffsetTFlags\.py_type\(self\._tab\.Offset\((?P<offset>\d+)\)\)\n"
    r"(?P<body>(?:        .*\n)+?)"
    r"        return (?P<default>.+)\n"
)
_SCALAR_GET = re.compile(r"self\._tab\.Get\(flatbuffers\.number_types\.(\w+)Flags")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _accessors(table: str) -> dict[str, re.Match[str]]:
    text = (GENERATED / f"{table}.py").read_text()
    return {m["name"]: m for m in _ACCESSOR.finditer(text)}


def _cases() -> list[tuple[Table, Field]]:
    return [(t, f) for t in SCHEMA.tables.values() for f in t.fields if not f.deprecated]


@pytest.mark.parametrize(("table", "field"), _cases(), ids=[f"{t.name}.{f.name}" for t, f in _cases()])
def test_field_agrees_with_flatc(table: Table, field: Field) -> None:
    # A vector's element accessor takes an index; its Length accessor shows the slot.
    suffix = "Length" if field.kind == "vector" else ""
    accessor = _accessors(table.name)[_camel(field.name) + suffix]
    assert int(accessor["offset"]) == 4 + 2 * field.slot  # the vtable slot
    if field.kind == "scalar":
        flags = _SCALAR_GET.search(accessor["body"])
        assert flags is not None
        assert FLAGS[flags.group(1)] == SCALARS[SCHEMA.scalar_of(field.type)]
        expected = "None" if field.optional else repr(field.default)
        if not field.optional and SCALARS[SCHEMA.scalar_of(field.type)][0] in "fd":
            expected = repr(float(field.default or 0))
        assert accessor["default"] == expected
    elif field.kind == "string":
        assert "self._tab.String(" in accessor["body"]
    elif field.kind == "table":
        assert f"import {field.type}" in accessor["body"]
    else:
        assert "self._tab.VectorLen(o)" in accessor["body"]


def test_every_flatc_table_is_in_the_ir() -> None:
    generated = {p.stem for p in GENERATED.glob("*.py") if p.stem != "__init__"}
    assert generated == set(SCHEMA.tables) | set(SCHEMA.structs) | set(SCHEMA.enums)


@pytest.mark.parametrize("name", sorted(SCHEMA.structs))
def test_struct_layout_agrees_with_flatc(name: str) -> None:
    text = (GENERATED / f"{name}.py").read_text()
    struct_ = SCHEMA.structs[name]
    for field, offset in zip(struct_.fields, struct_.offsets, strict=True):
        m = re.search(rf"def {_camel(field.name)}\(self\): return self\._tab\.Get\(flatbuffers\.number_types\."
                      rf"(\w+)Flags, self\._tab\.Pos \+ flatbuffers\.number_types\.UOffsetTFlags\.py_type\((\d+)\)\)",
                      text)
        assert m is not None, field.name
        assert (FLAGS[m.group(1)], int(m.group(2))) == (SCALARS[SCHEMA.scalar_of(field.type)], offset)
    assert f"builder.Prep({struct_.align}, {struct_.size})" in text


@pytest.mark.parametrize("name", sorted(SCHEMA.enums))
def test_enum_values_agree_with_flatc(name: str) -> None:
    text = (GENERATED / f"{name}.py").read_text()
    expected = {k: str(v) for k, v in SCHEMA.enums[name].values.items()}
    assert dict(re.findall(r"^    (\w+) = (-?\d+)$", text, re.M)) == expected


def test_roots_and_identifiers() -> None:
    roots = {t.name: t.identifier for t in SCHEMA.tables.values() if t.identifier}
    assert roots == {"CompletionRequest": "LGRQ", "CompletionResponse": "LGRS", "CompletionChunk": "LGCK",
                     "Error": "LGER", "EmbeddingRequest": "LGEQ", "EmbeddingResponse": "LGES"}
    assert {identifiers.REQUEST, identifiers.RESPONSE, identifiers.CHUNK, identifiers.ERROR,
            identifiers.EMBEDDING_REQUEST, identifiers.EMBEDDING_RESPONSE} == {i.encode() for i in roots.values()}
    assert SCHEMA.root_type == "CompletionRequest" and SCHEMA.file_identifier == "LGRQ"


def test_unsupported_constructs_are_refused() -> None:
    from codegen.schema import SchemaError

    for text in ("table T { u: MyUnion; } root_type T;", "table T { a: int (key); } root_type T;"):
        with pytest.raises(SchemaError):
            parse(text)

