"""Emit `readers.py`: per-table readers that turn a verified buffer into the encoders' data classes.

The stock Python runtime reads a field through several calls (`Table.Offset`, `Table.Get`, number
checks), about 1 µs each; these readers unpack a table's whole vtable at once and each field with one
precompiled `struct` call. They trust their input: verify first (`verifier.py`). On an unverified,
corrupt buffer they raise (struct.error, IndexError, UnicodeDecodeError, RecursionError), never loop.
"""

from __future__ import annotations

from codegen.emit import module_text, struct_format
from codegen.schema import SCALARS, Field, Schema, Table

DOC = '''"""Read {namespace} buffers into the data classes of `encoders.py`: the mirror of the encoders.

`read_<Root>(buf)` reads a whole buffer (no size prefix; the identifier is not checked) into
`<Root>Data`; absent fields read as their schema defaults, absent strings, tables and vectors as None,
enums as ints, struct vectors as tuples. A newer writer's extra fields are ignored; an older writer's
missing ones read as absent.

These readers trust the buffer: run the verifier first. On a corrupt buffer they raise an exception
(struct.error, IndexError, UnicodeDecodeError, RecursionError) rather than read out of bounds.
"""

from __future__ import annotations

import struct

from {package}.encoders import (
{imports}
)
from {package}.verifier import _ABSENT, _ENTRIES, _i32, _u16, _u32  # one copy of the vtable tables


def _vtable(buf: bytes, t: int, slots: int) -> tuple[int, ...]:
    """The field offsets of the table at `t`, one per slot (0: absent), however long its vtable."""
    vt = t - _i32(buf, t)[0]
    have = (_u16(buf, vt)[0] - 4) >> 1
    if have >= slots:
        return _ENTRIES[slots](buf, vt + 4)
    return _ENTRIES[have](buf, vt + 4) + _ABSENT[slots - have]


def _str(buf: bytes, at: int) -> str:
    """The string whose uoffset is at `at`."""
    at += _u32(buf, at)[0]
    return str(buf[at + 4:at + 4 + _u32(buf, at)[0]], "utf-8")


def _vector(buf: bytes, at: int) -> tuple[int, int]:
    """(start of the elements, count) of the vector whose uoffset is at `at`."""
    at += _u32(buf, at)[0]
    return at + 4, _u32(buf, at)[0]

'''


def _scalar_reader(schema: Schema, type_name: str) -> str:
    return "_S_" + SCALARS[schema.scalar_of(type_name)][0].replace("?", "bool")


def _field_expr(schema: Schema, f: Field) -> list[str]:
    """Lines that set local `f.name` from offset `o{slot}` of the table at `t`."""
    o = f"o{f.slot}"
    v = f"f_{f.name}"  # never a helper's name (`n`, `at`, `t`, `buf`), whatever the schema calls its fields
    if f.kind == "scalar":
        read = f"{_scalar_reader(schema, f.type)}(buf, t + {o})[0]"
        default = "None" if f.optional else repr(f.default)
        return [f"    {v} = {read} if {o} else {default}"]
    if f.kind == "string":
        return [f"    {v} = _str(buf, t + {o}) if {o} else None"]
    if f.kind == "table":
        return [f"    {v} = _read_{f.type}(buf, t + {o} + _u32(buf, t + {o})[0]) if {o} else None"]
    lines = [f"    {v} = None", f"    if {o}:", f"        at, n = _vector(buf, t + {o})"]
    if f.element_kind == "string":
        lines.append(f"        {v} = [_str(buf, at + 4 * i) for i in range(n)]")
    elif f.element_kind == "table":
        lines.append(f"        {v} = [_read_{f.type}(buf, at + 4 * i + _u32(buf, at + 4 * i)[0]) for i in range(n)]")
    elif f.element_kind == "struct":
        size = schema.structs[f.type].size
        lines.append(f"        {v} = [_T_{f.type}(buf, at + {size} * i) for i in range(n)]")
    else:
        ch, width = SCALARS[schema.scalar_of(f.type)]
        lines.append(f"        {v} = list(struct.unpack_from(f'<{{n}}{ch}', buf, at))")
    return lines


def _emit_table(schema: Schema, table: Table) -> list[str]:
    live = [f for f in table.fields if not f.deprecated]
    slots = max(f.slot for f in table.fields) + 1
    offsets = ", ".join(f"o{s}" if any(f.slot == s for f in live) else "_" for s in range(slots))
    lines = [
        f"def _read_{table.name}(buf: bytes, t: int) -> {table.name}Data:",
        f"    {offsets}{',' if slots == 1 else ''} = _vtable(buf, t, {slots})",
    ]
    for f in live:
        lines += _field_expr(schema, f)
    args = ", ".join(f"{f.name}=f_{f.name}" for f in live)
    lines += [f"    return {table.name}Data({args})", "", ""]
    return lines


def _emit_scalar_readers(schema: Schema) -> list[str]:
    used = set()
    for table in schema.tables.values():
        for f in table.fields:
            if f.kind == "scalar":
                used.add(SCALARS[schema.scalar_of(f.type)][0])
    lines = [f"_S_{ch.replace('?', 'bool')} = struct.Struct('<{ch}').unpack_from" for ch in sorted(used)]
    for s in schema.structs.values():
        lines.append(f"_T_{s.name} = struct.Struct('{struct_format(schema, s)}').unpack_from")
    return lines + ["", ""]


def emit_readers(schema: Schema, package: str, roots: dict[str, bytes]) -> str:
    """The module text. `roots` maps each root table to its file identifier."""
    tables = list(schema.tables.values())
    names = sorted(f"{t.name}Data" for t in tables)
    out = [DOC.format(namespace=schema.namespace, package=package,
                      imports="\n".join(f"    {n}," for n in names))]
    out += _emit_scalar_readers(schema)
    for table in tables:
        out += _emit_table(schema, table)
    for root in roots:
        out += [
            f"def read_{root}(buf: bytes) -> {root}Data:",
            f'    """A whole, verified {root} buffer."""',
            f"    return _read_{root}(buf, _u32(buf, 0)[0])",
            "",
            "",
        ]
    return module_text(out)
