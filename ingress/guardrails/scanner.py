"""One text through the rules: blocked terms (Aho-Corasick on casefolded text, whole words), then the
RE2 rules on its UTF-8 bytes; a block raises `Blocked`, redactions give a new text.

Cost, for the text that has nothing to find (nearly all of it): one casefold and one RE2 pass for the
terms (the automaton runs only where that pass finds a candidate), and one RE2 pass for all the rules
together (their alternation); only a text in which some rule has a candidate is scanned rule by rule,
each candidate then checked in Python. RE2 is linear in the text for each search.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import ahocorasick
import re2

from ingress.guardrails.config import Action
from ingress.guardrails.detectors import Verify

BLOCKED_TERMS = "blocked_terms"
# A redaction is scanned again (what it removed may have joined two pieces into a new hit); text that
# still changes after this many rounds is blocked instead.
MAX_ROUNDS = 3
# Whitespace other than lone spaces: where a text holds any, a term of several words is looked for in
# the text with each run of whitespace made one space. (str.split's whitespace, ASCII; other text: always.)
_LOOSE_SPACING = ("  ", "\n", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")
# In RE2, every character str.split() takes for whitespace, and a few more (\p{Z}: every space separator).
_ANY_SPACE = rb"[\t-\r\x1c-\x20\x{85}\p{Z}]+"


class Match(Protocol):
    def span(self) -> tuple[int, int]: ...


class Regex(Protocol):
    """What this package uses of a compiled `re2` pattern (the package ships no type hints)."""

    def search(self, text: bytes) -> Match | None: ...

    def finditer(self, text: bytes) -> Iterator[Match]: ...


def compile_regex(pattern: bytes) -> Regex:
    """An RE2 pattern on UTF-8 bytes; ValueError with RE2's reason for one it rejects."""
    options = re2.Options()
    options.log_errors = False  # the error is raised, and reported once, by the caller
    options.never_capture = True  # spans of whole matches only: no submatch work
    try:
        regex: Regex = re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        raise ValueError(detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)) from None
    return regex


def placeholder(label: str) -> bytes:
    return f"[REDACTED:{label}]".encode()


class Blocked(Exception):
    """A rule blocked the text; it carries the rule's name, never the text. Guard raises it again as
    PromptBlocked, with the request's field."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Rule:
    name: str  # reported when it blocks: pii.card, secrets.openai_key, patterns.<name>
    label: str  # written when it redacts: [REDACTED:<label>]
    pattern: bytes
    regex: Regex
    action: Action
    verify: Verify | None = None


def fold_term(term: str) -> str:
    """A term as it is looked for: casefolded, each run of whitespace one space."""
    return " ".join(term.casefold().split())


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _ascii_word(char: str) -> bool:
    return char.isascii() and _word(char)


def _term_pattern(key: str) -> bytes:
    """An RE2 pattern that matches wherever `key` may stand as whole words in casefolded text, and in some
    more places: RE2's `\\b` knows only ASCII word characters, so it is asked for only where the term's
    end is one (a boundary by Python's `isalnum` is then a boundary by RE2's), and any whitespace may part
    its words (a superset of str.split's)."""
    body = _ANY_SPACE.join(re2.escape(word.encode()) for word in key.split(" "))
    return (rb"\b" if _ascii_word(key[0]) else b"") + body + (rb"\b" if _ascii_word(key[-1]) else b"")


class Terms:
    """Blocked terms: whole words (or phrases), case-insensitive, found in one pass whatever their number.

    The automaton is exact; an RE2 pattern of all the terms, looser (see `_term_pattern`) and about ten
    times faster over text with no term in it, runs first and spares it that text. With more terms than
    RE2 will compile (its memory bound), the automaton runs alone."""

    def __init__(self, terms: Iterable[str]) -> None:
        self._automaton = ahocorasick.Automaton()
        self._phrases = False
        keys: set[str] = set()
        for term in terms:
            key = fold_term(term)
            # The term's length, and whether each of its ends is a word character (then a whole-word
            # match needs a boundary there; `c++` needs none after its last `+`).
            self._automaton.add_word(key, (len(key), _word(key[0]), _word(key[-1])))
            self._phrases = self._phrases or " " in key
            keys.add(key)
        self._automaton.make_automaton()
        try:
            self._prefilter: Regex | None = compile_regex(b"|".join(_term_pattern(k) for k in sorted(keys)))
        except ValueError:
            self._prefilter = None

    def found(self, text: str) -> bool:
        folded = text.casefold()
        if self._prefilter is not None and self._prefilter.search(folded.encode("utf-8", "surrogatepass")) is None:
            return False
        if self._phrases and (not folded.isascii() or any(s in folded for s in _LOOSE_SPACING)):
            folded = " ".join(folded.split())
        last = len(folded) - 1
        end: int
        for end, (length, left, right) in self._automaton.iter(folded):
            start = end - length + 1
            if left and start > 0 and _word(folded[start - 1]):
                continue  # inside a longer word
            if right and end < last and _word(folded[end + 1]):
                continue
            return True
        return False


class Scanner:
    """The rules of one Guard, applied to one text at a time; built once, shared by every request."""

    def __init__(self, terms: Terms | None, rules: Sequence[Rule]) -> None:
        self._terms = terms
        # Block rules first: a prompt with anything to block is refused before any redaction is done.
        self._rules = tuple(sorted(rules, key=lambda r: r.action != "block"))
        self._prefilter = _alternation(self._rules)

    def scan(self, text: str) -> str:
        """`text` itself when nothing matched, a new string when something was redacted; raises Blocked."""
        if self._terms is not None and self._terms.found(text):
            raise Blocked(BLOCKED_TERMS)
        if not self._rules:
            return text
        data = sent = text.encode("utf-8", "surrogatepass")
        for attempt in range(MAX_ROUNDS + 1):
            if self._prefilter is not None and self._prefilter.search(data) is None:
                break
            hits = self._hits(data)
            if not hits:
                break
            if attempt == MAX_ROUNDS:
                raise Blocked(hits[0][2].name)
            data = _redact(data, hits)
        return text if data is sent else data.decode("utf-8", "surrogatepass")

    def _hits(self, data: bytes) -> list[tuple[int, int, Rule]]:
        """The redactions `data` needs, in the rules' order; raises Blocked at the first hit of a block rule."""
        hits: list[tuple[int, int, Rule]] = []
        for rule in self._rules:
            for match in rule.regex.finditer(data):
                start, end = match.span()
                if start == end or (rule.verify is not None and not rule.verify(data, start, end)):
                    continue
                if rule.action == "block":
                    raise Blocked(rule.name)
                hits.append((start, end, rule))
        return hits


def _alternation(rules: Sequence[Rule]) -> Regex | None:
    """One pattern matching wherever any rule has a candidate; None if RE2 will not build it (then every
    text is scanned rule by rule, which finds the same)."""
    if len(rules) < 2:
        return None
    try:
        return compile_regex(b"|".join(b"(?:" + rule.pattern + b")" for rule in rules))
    except ValueError:
        return None


def _redact(data: bytes, hits: list[tuple[int, int, Rule]]) -> bytes:
    """`data` with each hit replaced by its rule's placeholder; overlapping hits become one, named after
    the one that begins first (the longer, at the same place)."""
    hits.sort(key=lambda h: (h[0], -h[1]))
    out = bytearray()
    pos = 0
    start, end, rule = hits[0]
    for s, e, r in hits[1:]:
        if s < end:
            end = max(end, e)
            continue
        out += data[pos:start] + placeholder(rule.label)
        pos, (start, end, rule) = end, (s, e, r)
    out += data[pos:start] + placeholder(rule.label) + data[end:]
    return bytes(out)
