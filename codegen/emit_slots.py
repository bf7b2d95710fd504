"""Emit `slots.py`: each table's vtable slots by field name, for the readers written by hand that read a
few fields of a frame in place (ingress/wire/answer.py) and must agree with the schema as the generated
readers do."""

from __future__ import annotations

from codegen.emit import module_text
from codegen.schema import Schema

DOC = '''"""The vtable slot of every field of every {namespace} table, in schema order (a deprecated field keeps
its slot), and each table's number of slots (`SLOTS`): what a reader that reads a few fields in place
indexes a table's vtable entries by, instead of numbers typed by hand.
"""

from __future__ import annotations

from typing import Final
'''


def emit_slots(schema: Schema) -> str:
    out = [DOC.format(namespace=schema.namespace), ""]
    for table in schema.tables.values():
        out += [f"class {table.name}:", f"    SLOTS: Final = {max((f.slot for f in table.fields), default=-1) + 1}"]
        out += [f"    {f.name}: Final = {f.slot}" for f in table.fields]
        out += ["", ""]
    return module_text(out)
