"""Emit `enums.py`: every schema enum's values by name and names by value, as the edge spells them.

A value's name is its schema name in snake_case, a run of capitals staying one word unless a
capitalised word follows (`ToolCalls` -> "tool_calls", `SelfHosted` -> "self_hosted", `OpenAI` ->
"openai"); a value named `Unset` stands for no value and is spelled None. So a new enum value is one
schema edit plus `python -m codegen`, and the OpenAI-side spelling follows from its name.
"""

from __future__ import annotations

import re

from codegen.emit import call, module_text
from codegen.schema import Enum, Schema, SchemaError

DOC = '''"""The {namespace} schema's enums: each value's number by its name on the OpenAI side, and back.

`<ENUM>_VALUES` maps a name to the value written on the wire, `<ENUM>_NAMES` a value (its index) to
the name; `<Enum>Name` is the Literal type of the names. A name is the schema value's name in
snake_case (`ToolCalls` -> "tool_calls", `OpenAI` -> "openai"); a value named `Unset` is None.
"""

from __future__ import annotations

from typing import Literal
'''

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])")
_CAPS = re.compile(r"(?<!^)(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])")


def wire_name(value: str) -> str | None:
    """The OpenAI-side spelling of an enum value's schema name (see the module docstring)."""
    return None if value == "Unset" else _WORD.sub("_", value).lower()


def _constant(name: str) -> str:
    """`FinishReason` -> `FINISH_REASON`."""
    return _CAPS.sub("_", name).upper()


def _literal(name: str | None) -> str:
    return "None" if name is None else f'"{name}"'


def _emit_enum(enum: Enum) -> list[str]:
    by_value = sorted(enum.values.items(), key=lambda item: item[1])
    if [v for _, v in by_value] != list(range(len(by_value))):
        raise SchemaError(f"enum {enum.name}: codegen needs values 0, 1, 2... without gaps")
    names = [wire_name(n) for n, _ in by_value]
    key = "str | None" if None in names else "str"
    const = _constant(enum.name)
    tail = ",)" if len(names) == 1 else ")"
    return [
        *call(0, f"{enum.name}Name = Literal[", [_literal(n) for n in names if n is not None], "]"),
        *call(0, f"{const}_VALUES: dict[{key}, int] = {{", [f"{_literal(n)}: {v}" for v, n in enumerate(names)], "}"),
        *call(0, f"{const}_NAMES: tuple[{key}, ...] = (", [_literal(n) for n in names], tail),
        "",
        "",
    ]


def emit_enums(schema: Schema) -> str:
    """The module text."""
    out = [DOC.format(namespace=schema.namespace)]
    for enum in schema.enums.values():
        out += _emit_enum(enum)
    return module_text(out)
