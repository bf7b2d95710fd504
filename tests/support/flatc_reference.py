"""The flatc-generated Python readers, driven field by field from the schema: the reference the
generated readers (ingress/wire/_generated/readers.py) are checked against.

`flatc_read(root, buf)` reads a whole buffer through flatc's accessors (`Name()`, `NameLength()`,
`NameIsNone()`, `Name(i)`) into the same data classes the generated readers return.
"""

from __future__ import annotations

import importlib
from typing import Any

import msgspec

from codegen.bindings import SCHEMA
from codegen.emit import _camel
from codegen.schema import Field, parse
from ingress.wire._generated import encoders as gen

IR = parse(SCHEMA.read_text())
PACKAGE = "ingress.wire._generated.LLMGateway"


def _cls(name: str) -> Any:
    return getattr(importlib.import_module(f"{PACKAGE}.{name}"), name)


def _element(f: Field, value: Any) -> Any:
    if f.element_kind == "string":
        return value.decode()
    if f.element_kind == "table":
        return _table(f.type, value)
    if f.element_kind == "struct":
        return tuple(getattr(value, _camel(sf.name))() for sf in IR.structs[f.type].fields)
    return value


def _table(name: str, obj: Any) -> Any:
    values: dict[str, Any] = {}
    for f in IR.tables[name].fields:
        if f.deprecated:
            continue
        accessor = getattr(obj, _camel(f.name))
        if f.kind == "scalar":
            values[f.name] = accessor()
        elif f.kind == "string":
            raw = accessor()
            values[f.name] = None if raw is None else raw.decode()
        elif f.kind == "table":
            child = accessor()
            values[f.name] = None if child is None else _table(f.type, child)
        elif getattr(obj, f"{_camel(f.name)}IsNone")():
            values[f.name] = None
        else:
            count = getattr(obj, f"{_camel(f.name)}Length")()
            values[f.name] = [_element(f, accessor(i)) for i in range(count)]
    return getattr(gen, f"{name}Data")(**values)


def same(a: Any, b: Any) -> bool:
    """Equal to the bit: == would take 0 for 0.0 and never take a NaN for itself (a mutant's float
    can be any bit pattern); MessagePack keeps each value's type and a float's exact bits."""
    return msgspec.msgpack.encode(a) == msgspec.msgpack.encode(b)


def flatc_read(root: str, buf: bytes) -> Any:
    """A whole buffer of table `root` (no size prefix), read through flatc's generated accessors."""
    return _table(root, _cls(root).GetRootAs(buf, 0))
