"""Emit `verifier.py`: a pure-Python FlatBuffers Verifier with one specialised function per table.

The checks mirror flatbuffers::Verifier (include/flatbuffers/verifier.h and the `Verify` methods flatc
writes for C++) check for check, so the C++ Verifier can serve as the oracle in tests. The emitted
module's docstring lists what is checked and every deliberate difference.
"""

from __future__ import annotations

from codegen.emit import call, import_lines, module_text
from codegen.schema import SCALARS, Field, Schema, Table

DOC = '''"""Verify {namespace} buffers before reading them: one check per table, run by a runtime Verifier.

`verify_<Root>(buf)` checks a whole buffer up front and returns None, or raises VerifyError (a
ValueError) naming the first check that failed. The checks are those of flatbuffers::Verifier (C++),
field by field; `ingress.wire.verifier_runtime.Verifier` holds the schema-independent part and lists in its
docstring what is checked and every deliberate difference.
"""

from __future__ import annotations

{imports}

reserve_slots({slots})  # vtable unpackers for the widest table

# Memo keys of tables and vectors of tables: position * _KINDS + kind (crafted buffers can reach one
# position as two types).
_KINDS = {kinds}
'''

RUNTIME = ("Buffer", "reserve_slots")
VERIFIER_RUNTIME = ("MAX_DEPTH", "MAX_SIZE", "MAX_TABLES", "TableCheck", "Verifier", "bad_scalar")


def _scalar_size(schema: Schema, type_name: str) -> int:
    return SCALARS[schema.scalar_of(type_name)][1]


def _describe(schema: Schema, f: Field) -> str:
    if f.kind == "vector":
        return f"[{f.type}]"
    if f.kind == "scalar" and f.type in schema.enums:
        return f"{f.type} ({schema.scalar_of(f.type)})"
    return f.type


def _emit_field(schema: Schema, table: Table, f: Field, kinds: dict[str, int]) -> list[str]:
    what = f'"{table.name}.{f.name}"'
    # "field", so that a field named `type` never reads as a `# type:` comment to a type checker.
    lines = [f"    o = e[{f.slot}]  # field {f.name}: {_describe(schema, f)}"]
    if f.kind == "scalar":
        size = _scalar_size(schema, f.type)
        if size == 1:
            lines.append("    if o and t + o > n - 1:")
        else:
            lines.append(f"    if o and ((t + o) & {size - 1} or t + o > n - {size}):")
        lines += call(8, "bad_scalar(", ["t + o", str(size), what])
        return lines
    lines.append("    if o:")
    target = f"v.offset(t + o, {what})"
    if f.kind == "string":
        lines += call(8, "v.string(", [target, what])
    elif f.kind == "table":
        lines += call(8, f"_table_{f.type}(", ["v", target])
    elif f.element_kind == "string":
        lines += call(8, "v.strings(", [target, what])
    elif f.element_kind == "table":
        lines.append(f"        x = {target}")
        key = f"x * _KINDS + {kinds['[' + f.type + ']']}"
        lines += call(8, "v.table_vector(", ["x", f"_table_{f.type}", key, what])
    elif f.element_kind == "struct":
        s = schema.structs[f.type]
        lines += call(8, "v.vector(", [target, str(s.size), str(s.align), what])
    else:
        size = _scalar_size(schema, f.type)
        lines += call(8, "v.vector(", [target, str(size), str(size), what])
    return lines


def _emit_table(schema: Schema, table: Table, kinds: dict[str, int]) -> list[str]:
    name = table.name
    slots = max((f.slot for f in table.fields), default=-1) + 1
    live = [f for f in table.fields if not f.deprecated]
    lines = [
        f"def _table_{name}(v: Verifier, t: int) -> None:",
        f"    key = t * _KINDS + {kinds[name]}",
        "    done = v.seen.get(key)",
        "    if done is not None:",
        f'        v.again(done, "{name}")',
        "        return",
        "    tables, peak = v.tables, v.peak",
        f'    e = v.table_start(t, {slots}, "{name}")',
    ]
    if any(f.kind == "scalar" for f in live):
        lines.append("    n = v.size")
    for f in live:
        lines += _emit_field(schema, table, f, kinds)
    lines += ["    v.table_end(key, tables, peak)", "", ""]
    return lines


def _kinds(schema: Schema) -> dict[str, int]:
    """Memo key suffixes: one per table, one per vector-of-table element type."""
    kinds: dict[str, int] = {}
    for name in schema.tables:
        kinds[name] = len(kinds)
    for name in schema.tables:
        kinds[f"[{name}]"] = len(kinds)
    return kinds


def emit_verifier(schema: Schema, roots: dict[str, bytes]) -> str:
    """The module text. `roots` maps each root table to its file identifier."""
    kinds = _kinds(schema)
    most = max((f.slot + 1 for t in schema.tables.values() for f in t.fields), default=0)
    imports = [*import_lines("ingress.wire.runtime", RUNTIME),
               *import_lines("ingress.wire.verifier_runtime", VERIFIER_RUNTIME)]
    out = [DOC.format(namespace=schema.namespace, imports="\n".join(imports), slots=most, kinds=len(kinds))]
    out.append("")
    for table in schema.tables.values():
        out += _emit_table(schema, table, kinds)
    out.append("ROOTS: dict[str, tuple[bytes, TableCheck]] = {")
    for root, ident in roots.items():
        out.append(f'    "{root}": ({ident!r}, _table_{root}),')
    out += ["}", "", ""]
    for root, ident in roots.items():
        out += [
            f"def verify_{root}(",
            "    buf: Buffer, *, size_prefixed: bool = False, strict: bool = True, max_size: int = MAX_SIZE,",
            "    max_depth: int = MAX_DEPTH, max_tables: int = MAX_TABLES,",
            ") -> None:",
            f'    """Raise VerifyError unless `buf` is a valid {root} buffer (file identifier {ident.decode()})."""',
            "    v = Verifier(buf, strict=strict, max_size=max_size, max_depth=max_depth, max_tables=max_tables)",
            f"    v.verify({ident!r}, _table_{root}, size_prefixed=size_prefixed)",
            "",
            "",
        ]
    return module_text(out)
