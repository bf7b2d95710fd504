"""Emit `encoders.py`: plain-data classes and two encoders per table, specialised from the schema IR.

- `encode_<Root>(buf, data)`: writes the buffer forward into a reused bytearray: each table's vtable
  and inline bytes in one `struct.pack`, children after their parent, offsets patched in place.
- `build_<Table>(builder, data)`: the same data through the stock flatbuffers.Builder and flatc's
  builder functions; the reference the fast encoders are tested against.
"""

from __future__ import annotations

import re

from codegen.schema import SCALARS, Field, Schema, Table
from codegen.schema import Struct as FbStruct

HEADER = '''"""Specialised FlatBuffers encoders for the {namespace} schema.

Data classes mirror the tables field for field (enums as ints, struct vectors as tuples, absent as None).
The schema-independent helpers are in `ingress.wire.runtime`.
"""

from __future__ import annotations

import struct

import msgspec
from flatbuffers import Builder

'''

PRELUDE = '''
_ZERO, _pack_u32, _patch_u32, _ref = _rt.ZERO, _rt.pack_u32, _rt.patch_u32, _rt.ref
_vector_start, _string_vector, _finish = _rt.vector_start, _rt.string_vector, _rt.finish
'''

WIDTH = 120  # the generated modules' line length, as pyproject's [tool.ruff]


def call(indent: int, head: str, args: list[str], tail: str = ")") -> list[str]:
    """`head` (ending in an opening bracket), the arguments and `tail`: one line if it fits in WIDTH, else
    the arguments packed onto continuation lines indented one level deeper, with a trailing comma."""
    pad = " " * indent
    one = f"{pad}{head}{', '.join(args)}{tail}"
    if len(one) <= WIDTH:
        return [one]
    lines, line = [f"{pad}{head}"], ""
    inner = pad + "    "
    for arg in args:
        piece = f"{arg},"
        if line and len(inner) + len(line) + 1 + len(piece) > WIDTH:
            lines.append(inner + line)
            line = ""
        line = f"{line} {piece}" if line else piece
    lines.append(inner + line)
    lines.append(pad + tail)
    return lines


def import_lines(module: str, names: list[str] | tuple[str, ...]) -> list[str]:
    """`from module import names` as isort writes it: one line if it fits, else one name a line."""
    one = f"from {module} import {', '.join(names)}"
    if len(one) <= WIDTH:
        return [one]
    return [f"from {module} import (", *(f"    {name}," for name in names), ")"]


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _py_type(schema: Schema, f: Field) -> str:
    if f.kind == "scalar":
        scalar = schema.scalar_of(f.type)
        base = "bool" if scalar == "bool" else ("float" if SCALARS[scalar][0] in "fd" else "int")
        return f"{base} | None" if f.optional else base
    if f.kind == "string":
        return "str | None"
    if f.kind == "table":
        return f"{f.type}Data | None"
    element = {"string": "str", "table": f"{f.type}Data", "struct": "tuple[object, ...]"}.get(
        f.element_kind or "", "int")
    if f.element_kind == "scalar":
        scalar = schema.scalar_of(f.type)
        element = "bool" if scalar == "bool" else ("float" if SCALARS[scalar][0] in "fd" else "int")
    return f"list[{element}] | None"


def _default_literal(f: Field) -> str:
    if f.kind != "scalar" or f.optional:
        return "None"
    return repr(f.default)


def _layout(schema: Schema, table: Table) -> tuple[dict[str, int], int, int]:
    """Inline offsets of every live field (largest first, each aligned), table size and alignment."""
    sized = []
    for f in table.fields:
        if f.deprecated:
            continue
        size = SCALARS[schema.scalar_of(f.type)][1] if f.kind == "scalar" else 4
        sized.append((size, f.slot, f.name))
    sized.sort(key=lambda item: (-item[0], item[1]))
    offsets, pos, align = {}, 4, 4
    for size, _, name in sized:
        pos = (pos + size - 1) // size * size
        offsets[name] = pos
        pos += size
        align = max(align, size)
    return offsets, (pos + align - 1) // align * align, align


def _table_format(schema: Schema, table: Table, offsets: dict[str, int], size: int) -> tuple[str, list[Field]]:
    """struct format for the inline table: soffset, then scalars at their offsets, zeros elsewhere."""
    by_offset = sorted((offsets[f.name], f) for f in table.fields if f.name in offsets)
    fmt, pos, scalars = "<i", 4, []
    for off, f in by_offset:
        if off > pos:
            fmt += f"{off - pos}x"
        if f.kind == "scalar":
            ch, width = SCALARS[schema.scalar_of(f.type)]
            fmt += ch
            scalars.append(f)
        else:
            fmt += "4x"
            width = 4
        pos = off + width
    if size > pos:
        fmt += f"{size - pos}x"
    return fmt, scalars


def _emit_data(schema: Schema, table: Table) -> list[str]:
    lines = [f"class {table.name}Data(msgspec.Struct, kw_only=True, gc=False):"]
    for f in table.fields:
        if not f.deprecated:
            lines.append(f"    {f.name}: {_py_type(schema, f)} = {_default_literal(f)}")
    return [*lines, "", ""]


def _emit_fast(schema: Schema, table: Table) -> list[str]:
    offsets, size, align = _layout(schema, table)
    slots = max(f.slot for f in table.fields) + 1
    vt_size = 4 + 2 * slots
    fmt, scalars = _table_format(schema, table, offsets, size)
    name = table.name
    lines = [
        "# The vtable, then the table inline.",
        *_packer(f"_VT_TB_{name}", f"<{2 + slots}H{fmt[1:]}"),
        "",
        "",
        f"def _write_{name}(buf: bytearray, o: {name}Data) -> int:",
    ]
    live = [f for f in table.fields if not f.deprecated]
    for f in live:
        if f.kind != "scalar" or f.optional:
            lines.append(f"    f_{f.name} = o.{f.name}")  # f_: never a local's name (`t`, `pad`, `buf`)
    lines.append(f"    pad = -(len(buf) + {vt_size}) & {align - 1}")
    lines.append("    if pad:")
    lines.append("        buf += _ZERO[pad]")
    vt_args = []
    by_slot = {f.slot: f for f in live}
    for slot in range(slots):
        at_slot = by_slot.get(slot)
        if at_slot is None:
            vt_args.append("0")
        elif at_slot.kind == "scalar" and not at_slot.optional:
            vt_args.append(str(offsets[at_slot.name]))
        else:
            vt_args.append(f"{offsets[at_slot.name]} if f_{at_slot.name} is not None else 0")
    lines.append(f"    t = len(buf) + {vt_size}")
    tb_args = [str(vt_size)]
    for f in scalars:
        if f.optional:
            zero = "False" if schema.scalar_of(f.type) == "bool" else "0"
            tb_args.append(f"f_{f.name} if f_{f.name} is not None else {zero}")
        else:
            tb_args.append(f"o.{f.name}")
    lines += call(4, f"buf += _VT_TB_{name}(", [str(vt_size), str(size), *vt_args, *tb_args])
    for f in live:
        if f.kind == "scalar":
            continue
        at = f"t + {offsets[f.name]}"
        local = f"f_{f.name}"
        lines.append(f"    if {local} is not None:")
        if f.kind == "string":
            # Inlined write_string and ref: strings are most of a request's fields.
            lines += [
                f"        d = {local}.encode()",
                "        pad = -len(buf) & 3",
                "        if pad:",
                "            buf += _ZERO[pad]",
                f"        _patch_u32(buf, {at}, len(buf) - ({at}))",
                "        buf += _pack_u32(len(d))",
                "        buf += d",
                '        buf += b"\\0"',
            ]
        elif f.kind == "table":
            lines.append(f"        _ref(buf, {at}, _write_{f.type}(buf, {local}))")
        elif f.element_kind == "string":
            lines.append(f"        _ref(buf, {at}, _string_vector(buf, {local}))")
        elif f.element_kind == "table":
            lines.append(f"        v = _vector_start(buf, len({local}))")
            lines.append(f"        buf += bytes(4 * len({local}))")
            lines.append(f"        for i, e_{f.name} in enumerate({local}):")  # one name per loop: types differ
            lines.append("            at = v + 4 + 4 * i")
            lines.append(f"            _patch_u32(buf, at, _write_{f.type}(buf, e_{f.name}) - at)")
            lines.append(f"        _ref(buf, {at}, v)")
        elif f.element_kind == "struct":
            struct_ = schema.structs[f.type]
            lines.append(f"        v = _vector_start(buf, len({local}), {struct_.align})")
            lines.append(f"        for e_{f.name} in {local}:")
            lines.append(f"            buf += _ST_{f.type}(*e_{f.name})")
            lines.append(f"        _ref(buf, {at}, v)")
        else:  # vector of scalars
            ch, width = SCALARS[schema.scalar_of(f.type)]
            lines.append(f"        v = _vector_start(buf, len({local}), {max(width, 1)})")
            lines.append(f"        buf += struct.pack(f'<{{len({local})}}{ch}', *{local})")
            lines.append(f"        _ref(buf, {at}, v)")
    lines += ["    return t", "", ""]
    return lines


def _packer(name: str, fmt: str) -> list[str]:
    """`name = struct.Struct(fmt).pack`, the format split into literals that fit WIDTH when it is long."""
    one = f"{name} = struct.Struct('{fmt}').pack"
    if len(one) <= WIDTH:
        return [one]
    step = WIDTH - 8
    return [f"{name} = struct.Struct(", *(f"    '{fmt[i:i + step]}'" for i in range(0, len(fmt), step)), ").pack"]


def struct_format(schema: Schema, s: FbStruct) -> str:
    """The `struct` module format of a FlatBuffers struct: its fields at their offsets, padding between."""
    fmt, pos = "<", 0
    for field_, off in zip(s.fields, s.offsets, strict=True):
        if off > pos:
            fmt += f"{off - pos}x"
        ch, width = SCALARS[schema.scalar_of(field_.type)]
        fmt += ch
        pos = off + width
    if s.size > pos:
        fmt += f"{s.size - pos}x"
    return fmt


def _emit_struct_packers(schema: Schema) -> list[str]:
    lines = [f"_ST_{s.name} = struct.Struct('{struct_format(schema, s)}').pack" for s in schema.structs.values()]
    return [*lines, "", ""]


def _emit_stock(schema: Schema, table: Table, module: str) -> list[str]:
    """The reference: flatc's generated builder functions on a stock flatbuffers.Builder."""
    name = table.name
    mod = f"_fb_{name}"
    lines = [f"def build_{name}(b: Builder, o: {name}Data) -> int:"]
    live = [f for f in table.fields if not f.deprecated]
    refs = []
    for f in live:
        if f.kind == "scalar":
            continue
        var = f"{f.name}_off"
        refs.append((f, var))
        lines.append(f"    {var} = 0")
        lines.append(f"    if o.{f.name} is not None:")
        if f.kind == "string":
            lines.append(f"        {var} = b.CreateString(o.{f.name})")
        elif f.kind == "table":
            lines.append(f"        {var} = build_{f.type}(b, o.{f.name})")
        elif f.element_kind in ("string", "table"):
            make = "b.CreateString(x)" if f.element_kind == "string" else f"build_{f.type}(b, x)"
            lines.append(f"        items = [{make} for x in o.{f.name}]")
            lines.append(f"        {mod}.Start{_camel(f.name)}Vector(b, len(items))")
            lines.append("        for item in reversed(items):")
            lines.append("            b.PrependUOffsetTRelative(item)")
            lines.append(f"        {var} = b.EndVector()")
        elif f.element_kind == "struct":
            lines.append(f"        {mod}.Start{_camel(f.name)}Vector(b, len(o.{f.name}))")
            lines.append(f"        for e_{f.name} in reversed(o.{f.name}):")
            lines.append(f"            _fb_{f.type}.Create{f.type}(b, *e_{f.name})")
            lines.append(f"        {var} = b.EndVector()")
        else:
            scalar = schema.scalar_of(f.type)
            prepend = "PrependBool" if scalar == "bool" else f"Prepend{_prepend_name(scalar)}"
            lines.append(f"        {mod}.Start{_camel(f.name)}Vector(b, len(o.{f.name}))")
            lines.append(f"        for e_{f.name} in reversed(o.{f.name}):")
            lines.append(f"            b.{prepend}(e_{f.name})")
            lines.append(f"        {var} = b.EndVector()")
    lines.append(f"    {mod}.Start(b)")
    for f in live:
        add = f"{mod}.Add{_camel(f.name)}"
        if f.kind == "scalar":
            if f.optional:
                lines.append(f"    if o.{f.name} is not None:")
                lines.append(f"        {add}(b, o.{f.name})")
            else:
                lines.append(f"    {add}(b, o.{f.name})")
        else:
            lines.append(f"    if {f.name}_off:")
            lines.append(f"        {add}(b, {f.name}_off)")
    lines += [f"    return int({mod}.End(b))", "", ""]
    return lines


def _prepend_name(scalar: str) -> str:
    canonical = {"byte": "Int8", "ubyte": "Uint8", "int8": "Int8", "uint8": "Uint8", "short": "Int16",
                 "ushort": "Uint16", "int16": "Int16", "uint16": "Uint16", "int": "Int32", "uint": "Uint32",
                 "int32": "Int32", "uint32": "Uint32", "long": "Int64", "ulong": "Uint64", "int64": "Int64",
                 "uint64": "Uint64", "float": "Float32", "float32": "Float32", "double": "Float64",
                 "float64": "Float64"}
    return canonical[scalar]


def _order(schema: Schema) -> list[Table]:
    """Tables with every table they contain before them, so data classes resolve in order."""
    done: dict[str, Table] = {}

    def visit(table: Table) -> None:
        if table.name in done:
            return
        done[table.name] = table  # mark first: cycles resolve through string annotations
        for f in table.fields:
            child = f.type if f.kind == "table" or f.element_kind == "table" else None
            if child is not None:
                visit(schema.tables[child])
        done.pop(table.name)
        done[table.name] = table

    for table in schema.tables.values():
        visit(table)
    return list(done.values())


def emit_encoders(schema: Schema, package: str, roots: dict[str, bytes]) -> str:
    """The module text. `roots` maps each root table to its file identifier."""
    tables = _order(schema)
    out = [HEADER.format(namespace=schema.namespace).rstrip("\n"), ""]
    out.append("from ingress.wire import runtime as _rt")
    flatc = [*(t.name for t in tables), *schema.structs]
    out += [f"from {package}.{schema.namespace} import {name} as _fb_{name}" for name in sorted(flatc)]
    out.append(PRELUDE)
    out.append("")
    for table in tables:
        out += _emit_data(schema, table)
    out += _emit_struct_packers(schema)
    for table in tables:
        out += _emit_fast(schema, table)
    for table in tables:
        out += _emit_stock(schema, table, package)
    for root, ident in roots.items():
        out += [
            f"def encode_{root}(buf: bytearray, data: {root}Data, *, size_prefixed: bool = False) -> None:",
            f'    """Append a finished {root} buffer (identifier {ident.decode()}) to an empty `buf`."""',
            f"    _finish(buf, _write_{root}, data, {ident!r}, size_prefixed)",
            "",
            "",
        ]
    return module_text(out)


def module_text(lines: list[str]) -> str:
    """Generated lines as a module: one final newline, and two blank lines between top-level blocks."""
    text = "\n".join(lines).rstrip() + "\n"
    return re.sub(r"\n{3,}(?=\S)", "\n\n\n", text)
