"""Emit `verifier.py`: a pure-Python FlatBuffers Verifier with one specialised function per table.

The checks mirror flatbuffers::Verifier (include/flatbuffers/verifier.h and the `Verify` methods flatc
writes for C++) check for check, so the C++ Verifier can serve as the oracle in tests. The emitted
module's docstring lists what is checked and every deliberate difference.
"""

from __future__ import annotations

from codegen.emit import module_text
from codegen.schema import SCALARS, Field, Schema, Table

DOC = '''"""Verify {namespace} buffers before reading them: a FlatBuffers Verifier specialised per table.

The flatbuffers Python runtime trusts its input: a corrupt buffer reads silently wrong, or raises
struct.error or IndexError from deep inside an accessor. `verify_<Root>(buf)` checks a whole buffer
up front and returns None, or raises VerifyError (a ValueError) naming the first check that failed.
No other exception escapes: every read is bounds-checked first, and anything unforeseen is wrapped.

With strict=False the verdicts are those of flatbuffers::Verifier (C++) with its default options
(max_depth 64, max_tables 1,000,000, check_alignment on). Checked, as in C++:
- the buffer is shorter than max_size (at most 2**31 - 1) and at least 12 bytes long;
- the file identifier; a size prefix (when size_prefixed) equals the length that follows it;
- every uoffset (the root's and each field's) is 4-aligned, inside the buffer, non-zero and, read
  as signed, positive; it points inside the buffer;
- each table: its soffset is 4-aligned and inside the buffer, its vtable 2-aligned, of even size and
  inside the buffer; each present field inside the buffer and aligned to its size (relative to the
  start of the buffer, size prefix included); nested tables recursively, at most max_depth deep and
  max_tables in all (a table reached twice counts twice);
- strings: the length, the bytes and a NUL terminator inside the buffer;
- vectors: the 4-aligned length, and length * element size inside the buffer without overflow; the
  elements of vectors of strings and tables are checked like fields (the element offsets themselves
  are not checked for zero or sign: C++ does not, and reads them the same way).

Not checked, as in C++: enum values (an unknown value reads as its integer; callers map it), bool
bytes other than 0 and 1, deprecated fields, vtable entries past the fields this schema knows (a
newer writer's), and bytes no offset reaches. Nor, with strict=False: a vtable's two header entries
(a shorter vtable reads every field as absent), the table's inline size, and the alignment of
vector elements (C++ aligns only their length).

Deliberate differences:
1. strict=True (the default) adds checks C++ leaves out: strings are valid UTF-8; a vtable holds at
   least its two header entries; a table's inline size (vtable entry 1) is at least 4 and inside the
   buffer; vector elements are aligned to their own alignment; at most len(buf) // 4 offsets are
   followed and at most len(buf) string bytes decoded. A buffer written by any FlatBuffers builder
   passes these: every uoffset occupies four bytes of its own and, with the memo below, is followed
   once, and strings do not overlap; so the last two rules only refuse crafted overlapping vectors or
   strings, whose verification is otherwise quadratic in the buffer size (for vectors, in C++ too).
   strict=False is for comparisons with the C++ Verifier.
2. A size prefix must equal the byte count after it exactly; C++ only requires it not to exceed it
   (the tests' C++ oracle insists on equality too). A prefix that understates its frame would
   desynchronise a stream reader.
3. A table or vector reached again through another offset (a DAG, legal in FlatBuffers) is not
   walked again: its table count and depth are remembered and added again, so the limits and the
   verdicts stay those of C++, while the work stays proportional to the buffer instead of up to
   max_tables table walks for a few kilobytes of shared offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
'''

PRELUDE = '''
MAX_SIZE = 0x7FFFFFFF  # FLATBUFFERS_MAX_BUFFER_SIZE: a buffer must be smaller
MAX_DEPTH = 64
MAX_TABLES = 1_000_000
_MIN_SIZE = 12  # FLATBUFFERS_MIN_BUFFER_SIZE: root offset, soffset and a 4-byte vtable
_UNBOUNDED = 1 << 62

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from
_ENTRIES = tuple(struct.Struct(f"<{{k}}H").unpack_from for k in range({entries}))
_ABSENT = tuple((0,) * k for k in range({entries}))
_DONE = (0, 0)


class VerifyError(ValueError):
    """The buffer failed a check; the message names the check, the table or field, and the position."""


class Verifier:
    """One buffer's verification: its options, and counters that stay readable afterwards.

    `tables` counts tables as flatbuffers::Verifier does (one reached twice counts twice); `walked`
    counts the tables and vectors actually walked, `refs` the offsets followed and `decoded` the string
    bytes checked for UTF-8.
    """

    __slots__ = ("buf", "size", "strict", "max_size", "max_depth", "max_tables", "depth", "peak", "tables",
                 "refs", "walked", "decoded", "seen", "_budget")

    def __init__(self, buf: bytes | bytearray | memoryview, *, strict: bool = True, max_size: int = MAX_SIZE,
                 max_depth: int = MAX_DEPTH, max_tables: int = MAX_TABLES) -> None:
        self.buf = buf
        self.size = 0
        self.strict = strict
        self.max_size = min(max_size, MAX_SIZE)
        self.max_depth = max_depth
        self.max_tables = max_tables
        self.depth = self.peak = self.tables = self.refs = self.walked = self.decoded = 0
        self.seen: dict[int, tuple[int, int]] = {{}}  # (position, kind) -> (tables, height) of a finished walk
        self._budget = _UNBOUNDED

    def verify(self, root: str, *, size_prefixed: bool = False) -> None:
        """Check the buffer as a `root` table (a key of ROOTS); raise VerifyError on the first failure."""
        identifier, table = ROOTS[root]
        self.depth = self.peak = self.tables = self.refs = self.walked = self.decoded = 0
        self.seen = {{}}
        try:
            self._buffer(identifier, size_prefixed, table)
        except VerifyError:
            raise
        except Exception as exc:  # every read is bounds-checked first: reaching this is a verifier bug
            raise VerifyError(f"unverifiable: {{type(exc).__name__}}: {{exc}}") from exc

    def _buffer(self, identifier: bytes, size_prefixed: bool, table: Callable[[Verifier, int], None]) -> None:
        buf = self.buf
        if not isinstance(buf, (bytes, bytearray)):
            buf = self.buf = bytes(buf)  # a memoryview of any format: flat bytes, len() in bytes
        n = self.size = len(buf)
        if n >= self.max_size:
            raise VerifyError(f"buffer: {{n}} bytes, not below the limit of {{self.max_size}}")
        start = 0
        if size_prefixed:
            if n <= 4:
                raise VerifyError(f"size prefix: buffer of {{n}} bytes")
            prefix = _u32(buf, 0)[0]
            if prefix != n - 4:
                raise VerifyError(f"size prefix: says {{prefix}} bytes follow, {{n - 4}} do")
            start = 4
        if n < _MIN_SIZE:
            raise VerifyError(f"buffer: {{n}} bytes, shorter than the smallest buffer ({{_MIN_SIZE}})")
        if buf[start + 4 : start + 8] != identifier:
            raise VerifyError(f"file identifier: {{bytes(buf[start + 4 : start + 8])!r}}, expected {{identifier!r}}")
        self._budget = n // 4 if self.strict else _UNBOUNDED
        table(self, self._offset(start, "root"))

    def _offset(self, p: int, what: str) -> int:
        """Verifier::VerifyOffset: the uoffset at `p` is aligned, non-zero, positive as signed, and points
        inside the buffer. Returns its target."""
        n = self.size
        if p & 3:
            raise VerifyError(f"{{what}}: offset at {{p}} misaligned")
        if p > n - 4:
            raise VerifyError(f"{{what}}: offset at {{p}} out of bounds")
        u = _u32(self.buf, p)[0]
        if u == 0 or u > 0x7FFFFFFF:
            raise VerifyError(f"{{what}}: offset at {{p}} is {{u}}: zero or negative")
        if p + u > n - 1:
            raise VerifyError(f"{{what}}: offset at {{p}} points past the end")
        self.refs += 1
        if self.refs > self._budget:
            self._follow(0, what)
        return p + u

    def _follow(self, count: int, what: str) -> None:
        self.refs += count
        if self.refs > self._budget:
            raise VerifyError(f"{{what}}: more offsets followed than a {{self.size}}-byte buffer holds (strict)")

    def _table_start(self, t: int, slots: int, what: str) -> tuple[int, ...]:
        """Verifier::VerifyTableStart. Returns the first `slots` vtable entries, 0 past the vtable's end."""
        buf, n = self.buf, self.size
        if t & 3:
            raise VerifyError(f"{{what}}: table at {{t}} misaligned")
        if t > n - 4:
            raise VerifyError(f"{{what}}: table at {{t}} out of bounds")
        vt = t - _i32(buf, t)[0]
        self.depth += 1
        self.tables += 1
        if self.depth > self.max_depth:
            raise VerifyError(f"{{what}}: tables nested deeper than {{self.max_depth}}")
        if self.tables > self.max_tables:
            raise VerifyError(f"{{what}}: more than {{self.max_tables}} tables")
        if vt & 1:
            raise VerifyError(f"{{what}}: vtable of the table at {{t}} misaligned")
        if vt < 0 or vt > n - 2:
            raise VerifyError(f"{{what}}: vtable of the table at {{t}} out of bounds")
        vs = _u16(buf, vt)[0]
        if vs & 1:
            raise VerifyError(f"{{what}}: vtable at {{vt}} has odd size {{vs}}")
        if vs >= n or vt > n - vs:
            raise VerifyError(f"{{what}}: vtable at {{vt}} runs past the end")
        if self.strict:
            if vs < 4:
                raise VerifyError(f"{{what}}: vtable at {{vt}} of {{vs}} bytes (strict)")
            ts = _u16(buf, vt + 2)[0]
            if ts < 4 or ts >= n or t > n - ts:
                raise VerifyError(f"{{what}}: table at {{t}} of {{ts}} bytes out of bounds (strict)")
        self.walked += 1
        self.peak = self.depth
        have = (vs - 4) >> 1
        if have >= slots:
            return _ENTRIES[slots](buf, vt + 4)
        if have <= 0:
            return _ABSENT[slots]
        return _ENTRIES[have](buf, vt + 4) + _ABSENT[slots - have]

    def _table_end(self, key: int, tables: int, peak: int) -> None:
        self.seen[key] = (self.tables - tables, self.peak - self.depth + 1)
        self.depth -= 1
        if peak > self.peak:
            self.peak = peak

    def _again(self, done: tuple[int, int], what: str) -> None:
        """A table or vector walked before: count its tables and depth again, as C++ would walk them."""
        count, height = done
        self.tables += count
        deepest = self.depth + height
        if deepest > self.max_depth:
            raise VerifyError(f"{{what}}: tables nested deeper than {{self.max_depth}}")
        if self.tables > self.max_tables:
            raise VerifyError(f"{{what}}: more than {{self.max_tables}} tables")
        if deepest > self.peak:
            self.peak = deepest

    def _string(self, s: int, what: str) -> None:
        """Verifier::VerifyString: length, bytes and NUL terminator inside the buffer; UTF-8 when strict."""
        buf, n = self.buf, self.size
        if s & 3:
            raise VerifyError(f"{{what}}: string at {{s}} misaligned")
        if s > n - 4:
            raise VerifyError(f"{{what}}: string at {{s}} out of bounds")
        end = s + 4 + _u32(buf, s)[0]
        if end >= n:
            raise VerifyError(f"{{what}}: string at {{s}} runs past the end")
        if buf[end]:
            raise VerifyError(f"{{what}}: string at {{s}} lacks its NUL terminator")
        if self.strict:
            key = s * _KINDS + _STRING
            if key not in self.seen:
                self.decoded += end - s - 4
                if self.decoded > n:
                    raise VerifyError(f"{{what}}: more string bytes than a {{n}}-byte buffer holds (strict)")
                text = buf[s + 4 : end]
                try:
                    if not text.isascii():
                        text.decode()
                except UnicodeDecodeError as exc:
                    raise VerifyError(f"{{what}}: string at {{s}} is not UTF-8: {{exc.reason}} (strict)") from None
                self.seen[key] = _DONE

    def _vector(self, x: int, size: int, align: int, what: str) -> int:
        """Verifier::VerifyVectorOrString: an aligned length, then its elements inside the buffer.
        Returns the length."""
        n = self.size
        if x & 3:
            raise VerifyError(f"{{what}}: vector at {{x}} misaligned")
        if x > n - 4:
            raise VerifyError(f"{{what}}: vector at {{x}} out of bounds")
        count = _u32(self.buf, x)[0]
        if count >= self.max_size // size:
            raise VerifyError(f"{{what}}: vector at {{x}} of {{count}} elements is too long")
        end = x + 4 + size * count
        if end > n or end - x >= n:
            raise VerifyError(f"{{what}}: vector at {{x}} runs past the end")
        if self.strict and (x + 4) & (align - 1):
            raise VerifyError(f"{{what}}: elements of the vector at {{x}} misaligned (strict)")
        return count

    def _strings(self, x: int, what: str) -> None:
        """A vector of strings at `x` (Verifier::VerifyVectorOfStrings), once per position."""
        key = x * _KINDS + _STRINGS
        if key in self.seen:
            return
        count = self._vector(x, 4, 4, what)
        self._follow(count, what)
        self.walked += 1
        first = x + 4
        for i, u in enumerate(struct.unpack_from(f"<{{count}}I", self.buf, first)):
            self._string(first + 4 * i + u, what)
        self.seen[key] = _DONE

    def _tables(self, x: int, table: Callable[[Verifier, int], None], kind: int, what: str) -> None:
        """A vector of tables at `x` (Verifier::VerifyVectorOfTables), walked once per position."""
        key = x * _KINDS + kind
        done = self.seen.get(key)
        if done is not None:
            self._again(done, what)
            return
        count = self._vector(x, 4, 4, what)
        self._follow(count, what)
        self.walked += 1
        tables, peak = self.tables, self.peak
        self.peak = self.depth
        first = x + 4
        for i, u in enumerate(struct.unpack_from(f"<{{count}}I", self.buf, first)):
            table(self, first + 4 * i + u)
        self.seen[key] = (self.tables - tables, self.peak - self.depth)
        if peak > self.peak:
            self.peak = peak


def _bad_scalar(p: int, size: int, n: int, what: str) -> None:
    if p & (size - 1):
        raise VerifyError(f"{{what}}: scalar at {{p}} misaligned")
    raise VerifyError(f"{{what}}: scalar at {{p}} out of bounds")
'''


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
    lines = [f"    o = e[{f.slot}]  # {f.name}: {_describe(schema, f)}"]
    if f.kind == "scalar":
        size = _scalar_size(schema, f.type)
        if size == 1:
            lines.append("    if o and t + o > n - 1:")
        else:
            lines.append(f"    if o and ((t + o) & {size - 1} or t + o > n - {size}):")
        lines.append(f"        _bad_scalar(t + o, {size}, n, {what})")
        return lines
    lines.append("    if o:")
    target = f"v._offset(t + o, {what})"
    if f.kind == "string":
        lines.append(f"        v._string({target}, {what})")
    elif f.kind == "table":
        lines.append(f"        _table_{f.type}(v, {target})")
    elif f.element_kind == "string":
        lines.append(f"        v._strings({target}, {what})")
    elif f.element_kind == "table":
        lines.append(f"        v._tables({target}, _table_{f.type}, {kinds['[' + f.type + ']']}, {what})")
    elif f.element_kind == "struct":
        s = schema.structs[f.type]
        lines.append(f"        v._vector({target}, {s.size}, {s.align}, {what})")
    else:
        size = _scalar_size(schema, f.type)
        lines.append(f"        v._vector({target}, {size}, {size}, {what})")
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
        f'        v._again(done, "{name}")',
        "        return",
        "    tables, peak = v.tables, v.peak",
        f'    e = v._table_start(t, {slots}, "{name}")',
    ]
    if any(f.kind == "scalar" for f in live):
        lines.append("    n = v.size")
    for f in live:
        lines += _emit_field(schema, table, f, kinds)
    lines += ["    v._table_end(key, tables, peak)", "", ""]
    return lines


def _kinds(schema: Schema) -> dict[str, int]:
    """Memo key suffixes: one per table, one per vector-of-table element type, strings, string vectors."""
    kinds: dict[str, int] = {}
    for name in schema.tables:
        kinds[name] = len(kinds)
    for name in schema.tables:
        kinds[f"[{name}]"] = len(kinds)
    kinds["[string]"] = len(kinds)
    kinds["string"] = len(kinds)
    return kinds


def emit_verifier(schema: Schema, roots: dict[str, bytes]) -> str:
    """The module text. `roots` maps each root table to its file identifier."""
    kinds = _kinds(schema)
    most = max((f.slot + 1 for t in schema.tables.values() for f in t.fields), default=0)
    out = [DOC.format(namespace=schema.namespace).rstrip("\n")]
    out.append(PRELUDE.format(entries=most + 1))
    out += [
        f"_KINDS = {len(kinds)}",
        f"_STRINGS = {kinds['[string]']}",
        f"_STRING = {kinds['string']}",
        "",
        "",
    ]
    for table in schema.tables.values():
        out += _emit_table(schema, table, kinds)
    out.append("ROOTS: dict[str, tuple[bytes, Callable[[Verifier, int], None]]] = {")
    for root, ident in roots.items():
        out.append(f'    "{root}": ({ident!r}, _table_{root}),')
    out += ["}", "", ""]
    for root, ident in roots.items():
        out += [
            f"def verify_{root}(",
            "    buf: bytes | bytearray | memoryview, *, size_prefixed: bool = False, strict: bool = True,",
            "    max_size: int = MAX_SIZE, max_depth: int = MAX_DEPTH, max_tables: int = MAX_TABLES,",
            ") -> None:",
            f'    """Raise VerifyError unless `buf` is a valid {root} buffer (file identifier {ident.decode()})."""',
            "    Verifier(buf, strict=strict, max_size=max_size, max_depth=max_depth, max_tables=max_tables).verify(",
            f'        "{root}", size_prefixed=size_prefixed',
            "    )",
            "",
            "",
        ]
    return module_text(out)
