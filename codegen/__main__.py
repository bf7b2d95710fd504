"""`python -m codegen [--check]`: regenerate the FlatBuffers bindings, or verify they are current."""

from __future__ import annotations

import argparse
import sys

from codegen.bindings import GENERATED_DIR, check, generate
from codegen.flatc import FlatcError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="fail if generated code is stale or the schema breaks the baseline")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = check()
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("generated code is stale: run `python -m codegen`", file=sys.stderr)
                return 1
            print("codegen: generated code is current; schema conforms to baseline")
            return 0
        written = generate()
    except FlatcError as exc:
        print(f"codegen: {exc}", file=sys.stderr)
        return 1
    print(f"codegen: wrote {len(written)} files under {GENERATED_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
