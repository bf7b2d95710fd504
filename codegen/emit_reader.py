"""Emit `readers.py`: per-table readers that turn a verified buffer into the encoders' data classes.

The stock Python runtime reads a field through several calls (`Table.Offset`, `Table.Get`, number
checks), about 1 µs each; these readers unpack a table's whole vtable at once and each field with one
precompiled `struct` call. They trust their input: verify first (`verifier.py`). On an unverified,
corrupt buffer they raise (struct.error, IndexError, UnicodeDecodeError, RecursionError), never loop.
"""

from __future__ import annotations

from codegen.emit import WIDTH, call, import_lines, module_text, struct_format
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

from ingress.wire import runtime as _rt
{imports}

_rt.reserve_slots({slots})  # vtable unpackers for the widest table
_u32, _vtable, _str, _vector = _rt.u32, _rt.vtable, _rt.read_string, _rt.vector
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
        read = f"_read_{f.type}(buf, t + {o} + _u32(buf, t + {o})[0]) if {o} else None"
        return _wrap(4, f"{v} = {read}", f"{v} = (", [read], ")")
    lines = [f"    {v} = None", f"    if {o}:", f"        at, n = _vector(buf, t + {o})"]
    if f.element_kind == "string":
        lines.append(f"        {v} = [_str(buf, at + 4 * i) for i in range(n)]")
    elif f.element_kind == "table":
        read = f"_read_{f.type}(buf, at + 4 * i + _u32(buf, at + 4 * i)[0])"
        lines += _wrap(8, f"{v} = [{read} for i in range(n)]", f"{v} = [", [read, "for i in range(n)"], "]")
    elif f.element_kind == "struct":
        size = schema.structs[f.type].size
        lines.append(f"        {v} = [_T_{f.type}(buf, at + {size} * i) for i in range(n)]")
    else:
        ch = SCALARS[schema.scalar_of(f.type)][0]
        lines.append(f"        {v} = list(struct.unpack_from(f'<{{n}}{ch}', buf, at))")
    return lines


def _wrap(indent: int, one: str, head: str, parts: list[str], tail: str) -> list[str]:
    """`one` on a line if it fits, else `head`, the parts one a line a level deeper, and `tail`."""
    pad = " " * indent
    if len(pad) + len(one) <= WIDTH:
        return [pad + one]
    return [pad + head, *(f"{pad}    {part}" for part in parts), pad + tail]


def _emit_table(schema: Schema, table: Table) -> list[str]:
    live = [f for f in table.fields if not f.deprecated]
    slots = max(f.slot for f in table.fields) + 1
    offsets = ", ".join(f"o{s}" if any(f.slot == s for f in live) else "_" for s in range(slots))
    lines = [f"def _read_{table.name}(buf: bytes, t: int) -> {table.name}Data:"]
    one = f"    {offsets}{',' if slots == 1 else ''} = _vtable(buf, t, {slots})"
    if len(one) <= WIDTH:
        lines.append(one)
    else:
        lines += call(4, "(", offsets.split(", "), f") = _vtable(buf, t, {slots})")
    for f in live:
        lines += _field_expr(schema, f)
    lines += call(4, f"return {table.name}Data(", [f"{f.name}=f_{f.name}" for f in live])
    lines += ["", ""]
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
    return [*lines, "", ""]


def emit_readers(schema: Schema, package: str, roots: dict[str, bytes]) -> str:
    """The module text. `roots` maps each root table to its file identifier."""
    tables = list(schema.tables.values())
    names = sorted(f"{t.name}Data" for t in tables)
    slots = max((f.slot + 1 for t in tables for f in t.fields), default=0)
    imports = "\n".join(import_lines(f"{package}.encoders", names))
    out = [DOC.format(namespace=schema.namespace, imports=imports, slots=slots)]
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
