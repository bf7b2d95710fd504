"""`python -m bench NAME [ARGS...]` runs a benchmark; `python -m bench --list` names each, with what it measures."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> dict[str, str]:
    """Each benchmark's name and the first line of its docstring, read without importing it."""
    found = {}
    for path in sorted(HERE.glob("[!_]*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def main() -> int:
    names = benchmarks()
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.splitlines()[0] if __doc__ else "")
        return 0 if len(sys.argv) >= 2 else 2
    if sys.argv[1] == "--list":
        width = max(map(len, names))
        print("\n".join(f"{name:<{width}}  {doc}" for name, doc in names.items()))
        return 0
    name = sys.argv[1]
    if name not in names:
        print(f"no benchmark {name!r}; `python -m bench --list` names them", file=sys.stderr)
        return 2
    sys.argv = [str(HERE / f"{name}.py"), *sys.argv[2:]]  # as if run alone: its argparse sees its own arguments
    runpy.run_module(f"bench.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
