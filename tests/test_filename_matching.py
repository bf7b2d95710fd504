"""Unit tests mirror the code: every tests/unit/test_X.py names a module X.py (or a package X/) under
ingress/ or codegen/, or is listed below with the reason it does not (mitmproxy's filename_matching)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "tests" / "unit"

# Unit tests of something other than one module, and why.
NOT_A_MODULE = {
    "test_article_schema.py": "the original LLMGateway schema's readers (tests/fixtures/) read our requests",
    "test_deploy.py": "deploy/: the manifests, the chart and the Dockerfile",
    "test_bench_lib.py": "bench/lib/: the benchmarks' shared servers, rounds and tables",
    "test_docs.py": "the README's and deploy/ingress.toml's examples",
    "test_golden_buffers.py": "the released schema versions (schema/baseline/): their buffers, read through wire/",
    "test_layers.py": "the import graph of ingress/'s packages, which of them may be async, where tasks spawn",
    "test_oracle.py": "tests/support/cxx_oracle.py, the FlatBuffers C++ Verifier the other tests consult",
}


def _names() -> set[str]:
    """Every module and package name under ingress/ and codegen/, the two packages included."""
    names = {"ingress", "codegen"}
    for root in ("ingress", "codegen"):
        for path in (REPO / root).rglob("*"):
            if "__pycache__" in path.parts:
                continue
            if path.suffix == ".py" and not path.name.startswith("__"):
                names.add(path.stem)
            elif path.is_dir() and (path / "__init__.py").exists():
                names.add(path.name)
    return names


def test_every_unit_test_file_names_the_module_it_tests() -> None:
    names = _names()
    unmatched = sorted(p.name for p in UNIT.glob("test_*.py")
                       if p.name not in NOT_A_MODULE and p.stem.removeprefix("test_") not in names)
    assert unmatched == [], (
        f"{unmatched} in tests/unit/ name no module under ingress/ or codegen/: name each test_<module>.py "
        "after the module it tests, or add it to NOT_A_MODULE with the reason")


def test_every_exception_is_still_needed() -> None:
    names = _names()
    stale = sorted(name for name in NOT_A_MODULE
                   if not (UNIT / name).exists() or name.removeprefix("test_").removesuffix(".py") in names)
    assert stale == [], f"listed in NOT_A_MODULE but missing, or now named after a module: {stale}"
