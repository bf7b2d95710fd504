"""ingress/tokens/pages.py: only a file's clean read-only mappings are released, their bytes read back the
same, and the pages a built vocabulary no longer reads leave the process's RSS."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest

from ingress.tokens.engines import Vocabulary, _bindings
from ingress.tokens.pages import SMAPS, Mapping, parse_smaps, release_clean_pages

SAMPLE = """\
7f0000000000-7f0000400000 r--p 00000000 fe:00 42                         /lib/x.so
Size:               4096 kB
Rss:                3000 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
7f0000400000-7f0000500000 r-xp 00400000 fe:00 42                         /lib/x.so
Rss:                 800 kB
Anonymous:             0 kB
7f0000500000-7f0000510000 r--p 00500000 fe:00 42                         /lib/x.so
Rss:                  64 kB
Private_Dirty:        64 kB
Anonymous:            64 kB
7f0000510000-7f0000512000 rw-p 00510000 fe:00 42                         /lib/x.so
Rss:                   8 kB
Anonymous:             8 kB
7f0000600000-7f0000700000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  12 kB
"""

linux = pytest.mark.skipif(not SMAPS.exists() or sys.platform != "linux", reason="needs /proc/self/smaps")


def test_smaps_are_read_into_mappings_with_their_resident_and_private_kilobytes() -> None:
    mappings = parse_smaps(SAMPLE)
    assert mappings[0] == Mapping(0x7F0000000000, 0x7F0000400000, "r--p", "/lib/x.so", 3000, 0)
    assert [(m.perms, m.path, m.rss_kb, m.private_kb) for m in mappings[1:]] == [
        ("r-xp", "/lib/x.so", 800, 0), ("r--p", "/lib/x.so", 64, 64), ("rw-p", "/lib/x.so", 8, 8),
        ("rw-p", "", 1024, 1024), ("rw-p", "[stack]", 12, 0)]


def test_only_read_only_file_mappings_with_no_private_page_are_clean() -> None:
    # code, the relocated (read-only after the loader wrote it) segment, data and anonymous memory stay
    assert [m.clean for m in parse_smaps(SAMPLE)] == [True, False, False, False, False, False]


def _resident_kb(path: Path) -> int:
    target = str(path.resolve())
    return sum(m.rss_kb for m in parse_smaps(SMAPS.read_text()) if m.path == target)


@linux
def test_a_mapped_files_pages_are_released_and_read_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    data = bytes(range(256)) * (4 * 4096)  # 4 MiB
    with path.open("wb") as out:  # written back: a page cache page not yet on disk counts as dirty
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as view:
        assert sum(view[i + 1] for i in range(0, len(data), mmap.PAGESIZE)) == len(data) // mmap.PAGESIZE  # all read
        before = _resident_kb(path)
        assert before >= 3 * 1024
        released = release_clean_pages(path)
        assert released == before
        assert _resident_kb(path) == 0
        assert view[:] == data  # read again from the file, the same bytes


@linux
def test_a_mapping_written_privately_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x01" * (1 << 20))
    with path.open("r+b") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) as view:
        view[0] = 2  # a private copy of one page: the mapping is writable, and no longer the file's bytes
        assert release_clean_pages(path) == 0
        assert view[0] == 2


def test_a_file_not_mapped_releases_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never-mapped.bin"
    path.write_bytes(b"x")
    assert release_clean_pages(path) == 0


@linux
def test_a_built_vocabulary_leaves_its_serialized_form_out_of_the_rss() -> None:
    fresh = Vocabulary("cl100k")
    fresh.load()  # reads its serialized tables from the extension's read-only data, then releases them
    path = Path(_bindings().__file__)
    clean = sum(m.rss_kb for m in parse_smaps(SMAPS.read_text()) if m.path == str(path.resolve()) and m.clean)
    assert clean < 2 * 1024  # kB; building it touches ~15 MB of them
    assert fresh.count("hello world") == 2 and fresh.count("Hello, y'all! 我想在apple工作") == 13


def test_the_mappings_of_one_path_alone_are_read() -> None:
    assert [(m.perms, m.rss_kb) for m in parse_smaps(SAMPLE, "/lib/x.so")] == [
        ("r--p", 3000), ("r-xp", 800), ("r--p", 64), ("rw-p", 8)]
    assert parse_smaps(SAMPLE, "/lib/other.so") == []
