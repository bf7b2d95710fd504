"""Build-time code generation from schema/: Python readers and builders via the pinned flatc."""

from __future__ import annotations

from codegen.bindings import GENERATED_DIR, SCHEMA, check, conform, generate
from codegen.flatc import FlatcError, flatc_path, include_dir, run_flatc

__all__ = [
    "GENERATED_DIR",
    "SCHEMA",
    "FlatcError",
    "check",
    "conform",
    "flatc_path",
    "generate",
    "include_dir",
    "run_flatc",
]
