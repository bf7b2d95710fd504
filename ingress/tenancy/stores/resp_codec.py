"""RESP2 on bytes (sans-I/O), what the Redis store's client sends and reads: commands encoded, replies parsed.

- `encode(*parts)` a command, an array of bulk strings; `Script(source)` encodes the fixed head of its
  EVALSHA once (command name, sha), and a call appends the keys and arguments.
- `ReplyParser` reads what our scripts return: integers, bulk and simple strings, arrays (nested), nil,
  errors (as `ReplyError` values), from the bytes as they arrive, a reply split anywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NoReturn

Arg = str | bytes | int


class ReplyError(Exception):
    """An error reply: `message` is its whole line (e.g. "ERR unknown command", "NOSCRIPT No matching...")."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NoScriptError(ReplyError):
    """The server does not have the script (restarted, or its script cache flushed)."""


class ProtocolError(ConnectionError):
    """The server sent what is not RESP2: the connection is closed."""


# --- encoding -------------------------------------------------------------------------------------------


def _bulk(value: Arg) -> bytes:
    if type(value) is bytes:
        data = value
    elif type(value) is str:
        data = value.encode()
    elif type(value) is int:
        data = b"%d" % value
    else:
        _refuse(value)
    return b"$%d\r\n%b\r\n" % (len(data), data)


def _refuse(value: object) -> NoReturn:
    raise TypeError(f"a command argument must be str, bytes or int, not {type(value).__name__}")


def encode(*parts: Arg) -> bytes:
    """A command, as RESP2 sends it: an array of bulk strings."""
    return b"".join([b"*%d\r\n" % len(parts), *map(_bulk, parts)])


class Script:
    """A Lua script, called by its sha; the EVALSHA head encoded once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self.load = encode("SCRIPT", "LOAD", source)
        self._head = _bulk("EVALSHA") + _bulk(self.sha)

    def command(self, keys: Sequence[Arg], args: Sequence[Arg]) -> bytes:
        head = b"".join([b"*%d\r\n" % (3 + len(keys) + len(args)), self._head, _bulk(len(keys))])
        return head + _arguments(keys, args)


def _arguments(keys: Sequence[Arg], args: Sequence[Arg]) -> bytes:
    """Bulk strings, made as one str and encoded once when every one is ASCII (where a character's length
    is its byte length): half the CPU of encoding each (the keys and tickets always are)."""
    try:
        text = "".join([f"${len(v)}\r\n{v}\r\n" for v in [
            v if type(v) is str else v.decode() if type(v) is bytes else str(v) if type(v) is int else _refuse(v)
            for v in (*keys, *args)]])
    except UnicodeDecodeError:
        text = ""
    data = text.encode()
    if len(data) == len(text) and text:
        return data
    return b"".join([*map(_bulk, keys), *map(_bulk, args)])


# --- parsing --------------------------------------------------------------------------------------------


class _Incomplete(Exception):
    """The buffer ends inside a reply."""


_INCOMPLETE = _Incomplete()
_COLON, _DOLLAR, _STAR, _PLUS, _MINUS = b":$*+-"


def _error(line: str) -> ReplyError:
    return NoScriptError(line) if line.startswith("NOSCRIPT") else ReplyError(line)


def _parse(buf: bytearray, pos: int) -> tuple[Any, int]:
    """The reply starting at `pos` and where the next begins; _Incomplete if it has not all arrived."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _INCOMPLETE
    kind = buf[pos]
    if kind == _COLON:
        return int(buf[pos + 1:end]), end + 2
    if kind == _DOLLAR:
        n = int(buf[pos + 1:end])
        if n < 0:
            return None, end + 2
        start, stop = end + 2, end + 2 + n
        if len(buf) < stop + 2:
            raise _INCOMPLETE
        if buf[stop:stop + 2] != b"\r\n":
            raise ProtocolError("a bulk string longer than it said")
        return bytes(buf[start:stop]), stop + 2
    if kind == _STAR:
        n = int(buf[pos + 1:end])
        if n < 0:
            return None, end + 2
        items, pos = [], end + 2
        for _ in range(n):
            item, pos = _parse(buf, pos)
            items.append(item)
        return items, pos
    if kind == _PLUS:
        return bytes(buf[pos + 1:end]), end + 2
    if kind == _MINUS:
        return _error(buf[pos + 1:end].decode("utf-8", "replace")), end + 2
    raise ProtocolError(f"a reply of unknown type {chr(kind)!r}")


class _Bail(Exception):
    """Not for the fast path: the general one reads it."""


_BAIL = _Bail()


def _line(lines: list[bytes], i: int) -> tuple[Any, int]:
    """The reply starting at line i, and the line after it, from a buffer split at every CRLF: two to three
    times faster than _parse, for the replies whose bulk strings hold no CRLF (all of our script's)."""
    line = lines[i]
    kind = line[0]
    if kind == _COLON:
        return int(line[1:]), i + 1
    if kind == _STAR:
        n = int(line[1:])
        if n < 0:
            return None, i + 1
        items, i = [], i + 1
        for _ in range(n):
            line = lines[i]
            if line[0] == _COLON:
                items.append(int(line[1:]))
                i += 1
            else:
                item, i = _line(lines, i)
                items.append(item)
        return items, i
    if kind == _DOLLAR:
        n = int(line[1:])
        if n < 0:
            return None, i + 1
        if len(lines[i + 1]) != n:
            raise _BAIL  # its content holds a CRLF, or has not all arrived
        return lines[i + 1], i + 2
    if kind == _PLUS:
        return line[1:], i + 1
    if kind == _MINUS:
        return _error(line[1:].decode("utf-8", "replace")), i + 1
    raise _BAIL


class ReplyParser:
    """Replies from bytes as they arrive, split anywhere (sans-I/O). An error reply is a ReplyError value."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """The replies completed by `data`, in order; ProtocolError when it is not RESP2."""
        if not self.buffer and data.endswith(b"\r\n"):  # whole replies in one read, as nearly always
            lines = data.split(b"\r\n")
            last, i, replies = len(lines) - 1, 0, []
            try:
                while i < last:
                    reply, i = _line(lines, i)
                    replies.append(reply)
            except (_Bail, IndexError, ValueError):
                pass  # the general path reads it (and names what is wrong with it)
            else:
                if i == last:
                    return replies
        buf = self.buffer
        buf += data
        replies, pos = [], 0
        try:
            while pos < len(buf):
                reply, pos = _parse(buf, pos)
                replies.append(reply)
        except _Incomplete:
            pass
        except ValueError as exc:  # int() of what is not a number
            raise ProtocolError("a length or an integer that is not a number") from exc
        del buf[:pos]
        return replies
