"""The fixed-width text tables the scripts print: a header, a rule under it, then a row per line."""

from __future__ import annotations

import re

_ALIGN = re.compile(r"^([<>^]?)(\d*)")


def figure(value: float | None, digits: int = 1, missing: str = "-") -> str:
    """A figure for a table's cell: `digits` decimals under 100, none from 100 on, thousands separated;
    `missing` for None or NaN (a figure a run could not give)."""
    if value is None or value != value:
        return missing
    return f"{value:,.{digits}f}" if abs(value) < 100 else f"{value:,.0f}"


def _width(spec: str) -> str:
    found = _ALIGN.match(spec)
    return found[0] if found else ""


class Table:
    """Columns given as (title, format spec): `"<16"` a left-aligned text column 16 wide, `">9.3f"` a number
    right-aligned 9 wide with three decimals. A number cell is formatted by its column's spec; a string
    cell (a figure already formatted, a label, "-") only aligned to the column's width; None leaves the
    column blank."""

    def __init__(self, *columns: tuple[str, str]) -> None:
        self.titles = [title for title, _ in columns]
        self.specs = [spec for _, spec in columns]
        self.widths = [_width(spec) for spec in self.specs]  # the alignment and width alone: ">9"

    def header(self) -> str:
        """The titles, and a rule under them as long as the line."""
        line = "".join(f"{title:{width or '>'}}" for title, width in zip(self.titles, self.widths, strict=True))
        return line + "\n" + "-" * len(line)

    def row(self, *cells: object) -> str:
        out = []
        for cell, spec, width in zip(cells, self.specs, self.widths, strict=False):
            if cell is None:
                out.append(" " * int(width.lstrip("<>^") or 0))
            elif isinstance(cell, str):
                out.append(f"{cell:{width or '<'}}")
            else:
                out.append(f"{cell:{spec}}")
        return "".join(out)
