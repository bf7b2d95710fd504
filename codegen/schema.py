"""Parse the subset of the FlatBuffers schema language our schema uses into a small IR.

Supported: namespace, enum (with an underlying integer type), struct, table, `= null` optional scalars,
defaults, `(deprecated)`, vectors of scalars/strings/structs/tables, root_type, file_identifier,
// and /// comments. Anything else is refused, so codegen never guesses a meaning: tests check the IR
against flatc's own reading of the schema (its reflection output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SCALARS: dict[str, tuple[str, int]] = {
    # type: (struct format character, size)
    "bool": ("?", 1), "byte": ("b", 1), "ubyte": ("B", 1), "int8": ("b", 1), "uint8": ("B", 1),
    "short": ("h", 2), "ushort": ("H", 2), "int16": ("h", 2), "uint16": ("H", 2),
    "int": ("i", 4), "uint": ("I", 4), "int32": ("i", 4), "uint32": ("I", 4),
    "float": ("f", 4), "float32": ("f", 4),
    "long": ("q", 8), "ulong": ("Q", 8), "int64": ("q", 8), "uint64": ("Q", 8),
    "double": ("d", 8), "float64": ("d", 8),
}


class SchemaError(ValueError):
    pass


@dataclass
class Enum:
    name: str
    underlying: str
    values: dict[str, int]


@dataclass
class StructField:
    name: str
    type: str


@dataclass
class Struct:
    name: str
    fields: list[StructField]
    size: int = 0
    align: int = 1
    offsets: list[int] = field(default_factory=list)


@dataclass
class Field:
    name: str
    slot: int
    kind: str  # "scalar", "string", "table", "vector"
    type: str  # scalar type, enum name, table name, or the element type of a vector
    element_kind: str | None = None  # for vectors: "scalar", "string", "struct", "table"
    default: float | int | bool | None = 0
    optional: bool = False
    deprecated: bool = False


@dataclass
class Table:
    name: str
    fields: list[Field]
    identifier: str | None = None  # from the `identifier` attribute: the table is a root of its own


@dataclass
class Schema:
    namespace: str
    enums: dict[str, Enum]
    structs: dict[str, Struct]
    tables: dict[str, Table]
    root_type: str
    file_identifier: str

    def scalar_of(self, type_name: str) -> str:
        """The underlying scalar type of a scalar or enum type name."""
        return self.enums[type_name].underlying if type_name in self.enums else type_name


_COMMENT = re.compile(r"//[^\n]*")
_DECL = re.compile(
    r"(namespace|attribute|enum|struct|table|root_type|file_identifier)\b(.*?)(?:;|\{(.*?)\})", re.DOTALL
)
_TABLE_HEAD = re.compile(r'^(?P<name>\w+)\s*(?:\(\s*identifier\s*:\s*"(?P<identifier>[^"]{4})"\s*\))?$')
_FIELD = re.compile(
    r"^(?P<name>\w+)\s*:\s*(?P<type>\[?\s*\w+\s*\]?)\s*(?:=\s*(?P<default>[^()\s;]+))?\s*(?:\((?P<attrs>[^)]*)\))?$"
)


def _default(raw: str | None, type_name: str, enums: dict[str, Enum]) -> float | int | bool | None:
    if raw is None:  # FlatBuffers' implicit default: false, 0 or 0.0, as the type reads
        if type_name == "bool":
            return False
        scalar = enums[type_name].underlying if type_name in enums else type_name
        return 0.0 if SCALARS[scalar][0] in "fd" else 0
    if raw == "null":
        return None
    if type_name in enums:
        return enums[type_name].values[raw] if raw in enums[type_name].values else int(raw)
    if type_name == "bool":
        return raw == "true"
    return float(raw) if SCALARS[type_name][0] in "fd" else int(raw)


def parse(text: str) -> Schema:
    text = _COMMENT.sub("", text)
    namespace = root = ident = ""
    enums: dict[str, Enum] = {}
    structs: dict[str, Struct] = {}
    tables: dict[str, Table] = {}
    for match in _DECL.finditer(text):
        keyword, head, body = match.group(1), match.group(2).strip(), match.group(3)
        if keyword == "namespace":
            namespace = head
        elif keyword == "attribute":
            if head.strip('"') != "identifier":
                raise SchemaError(f"unsupported attribute declaration {head}")
        elif keyword == "root_type":
            root = head
        elif keyword == "file_identifier":
            ident = head.strip('"')
        elif keyword == "enum":
            name, underlying = (part.strip() for part in head.split(":"))
            values, nxt = {}, 0
            for item in filter(None, (i.strip() for i in (body or "").split(","))):
                key, _, value = (part.strip() for part in item.partition("="))
                nxt = int(value) if value else nxt
                values[key] = nxt
                nxt += 1
            enums[name] = Enum(name, underlying, values)
        elif keyword == "struct":
            fields = []
            for line in filter(None, (x.strip() for x in (body or "").split(";"))):
                fname, ftype = (part.strip() for part in line.split(":"))
                fields.append(StructField(fname, ftype))
            structs[head] = _layout(Struct(head, fields), enums)
        else:
            m = _TABLE_HEAD.match(head)
            if m is None:
                raise SchemaError(f"cannot read table declaration: table {head}")
            tables[m["name"]] = Table(m["name"], _table_fields(body or "", enums, structs), m["identifier"])
    if not root or root not in tables:
        raise SchemaError("the schema needs a root_type naming a table")
    if tables[root].identifier not in (None, ident):
        raise SchemaError(f"{root}: its identifier attribute differs from the file_identifier")
    for table in tables.values():  # resolve kinds that name tables declared later
        for f in table.fields:
            if f.kind == "unresolved":
                if f.type not in tables:
                    raise SchemaError(f"{table.name}.{f.name}: unknown type {f.type}")
                f.kind = "table"
            if f.element_kind == "unresolved":
                if f.type not in tables:
                    raise SchemaError(f"{table.name}.{f.name}: unknown element type {f.type}")
                f.element_kind = "table"
    return Schema(namespace, enums, structs, tables, root, ident)


def _layout(struct: Struct, enums: dict[str, Enum]) -> Struct:
    pos = 0
    for f in struct.fields:
        scalar = enums[f.type].underlying if f.type in enums else f.type
        if scalar not in SCALARS:
            raise SchemaError(f"struct {struct.name}: only scalar fields are supported")
        size = SCALARS[scalar][1]
        pos = (pos + size - 1) // size * size
        struct.offsets.append(pos)
        pos += size
        struct.align = max(struct.align, size)
    struct.size = (pos + struct.align - 1) // struct.align * struct.align
    return struct


def _table_fields(body: str, enums: dict[str, Enum], structs: dict[str, Struct]) -> list[Field]:
    fields = []
    for slot, line in enumerate(filter(None, (x.strip() for x in body.split(";")))):
        m = _FIELD.match(" ".join(line.split()))
        if not m:
            raise SchemaError(f"cannot read field declaration: {line!r}")
        type_text = m["type"].replace(" ", "")
        attrs = {a.strip() for a in (m["attrs"] or "").split(",") if a.strip()}
        unknown = attrs - {"deprecated"}
        if unknown:
            raise SchemaError(f"unsupported attributes {sorted(unknown)} on {m['name']}")
        f = Field(m["name"], slot, "", "", deprecated="deprecated" in attrs)
        if type_text.startswith("["):
            f.kind, f.type = "vector", type_text[1:-1]
            f.element_kind = _kind_of(f.type, enums, structs)
            f.default = None
        else:
            f.type = type_text
            f.kind = _kind_of(type_text, enums, structs)
            if f.kind == "struct":
                raise SchemaError(f"{m['name']}: struct fields in tables are not supported")
            if f.kind == "scalar":
                f.default = _default(m["default"], f.type, enums)
                f.optional = f.default is None
            else:
                f.default = None
        fields.append(f)
    return fields


def _kind_of(type_name: str, enums: dict[str, Enum], structs: dict[str, Struct]) -> str:
    if type_name in SCALARS or type_name in enums:
        return "scalar"
    if type_name == "string":
        return "string"
    if type_name in structs:
        return "struct"
    return "unresolved"
