"""The Exchange's parts each have one writer: a stage writes its own part, and only the edge reads them all.

Found by reading ingress/ as Python: an assignment (or `began()`) whose target is an exchange's field, a part's
field reached through the exchange, a local name bound to a part (`answer = exchange.answer`), or a parameter
typed as one (`attempts: Attempts`)."""

from __future__ import annotations

import ast
from pathlib import Path

from ingress.exchange import Admitted, Answer, Attempts, Exchange, Routed

INGRESS = Path(__file__).resolve().parents[2] / "ingress"

PARTS = {"routed": Routed, "admitted": Admitted, "attempts": Attempts, "answer": Answer}
WRITERS = {
    "edge": {"edge/conversations.py", "edge/endpoints.py", "edge/gemini.py", "edge/messages.py", "edge/middleware.py",
             "edge/writers.py"},
    "routed": {"pipeline/prepare.py", "pipeline/prepare_gemini.py", "pipeline/prepare_messages.py",
               "pipeline/relay.py"},  # relay: a buffer's
    "admitted": {"pipeline/admit.py"},
    "attempts": {"pipeline/send.py"},
    "answer": {"pipeline/answer.py", "pipeline/stream.py", "pipeline/stream_dialects.py",  # the stages that
               "pipeline/relay.py"},  # read answers
    "cache": {"pipeline/cache.py"},
}
WRITING_METHODS = {"began"}  # a part's methods that set its fields (`take()` only lets go, at settle)


def _part_of(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The part an expression is: `exchange.<part>` (any `.exchange` too), or a name bound to one."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr in PARTS and _is_exchange(node.value):
        return node.attr
    return None


def _is_exchange(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "exchange") or (
        isinstance(node, ast.Attribute) and node.attr == "exchange")


def _written(target: ast.expr, aliases: dict[str, str]) -> str | None:
    """The part an assignment target writes, "edge" for the exchange's own fields, "cache" for its outcome."""
    if not isinstance(target, ast.Attribute):
        return None
    if (part := _part_of(target.value, aliases)) is not None:
        return part
    if _is_exchange(target.value):
        return "cache" if target.attr == "cache" else target.attr if target.attr in PARTS else "edge"
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    for target in targets:
        flat += target.elts if isinstance(target, ast.Tuple) else [target]
    return flat


def writes() -> list[tuple[str, int, str]]:
    """Every write to an exchange or one of its parts under ingress/: (module, line, part)."""
    found = []
    for path in sorted(INGRESS.rglob("*.py")):
        module = path.relative_to(INGRESS).as_posix()
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            aliases = {arg.arg: name for arg in function.args.args + function.args.kwonlyargs
                       for name, part in PARTS.items()
                       if isinstance(arg.annotation, ast.Name) and arg.annotation.id == part.__name__}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):  # `answer = exchange.answer`, `routed, x = exchange.routed, ...`
                    pairs = zip(node.targets[0].elts, node.value.elts, strict=False) if isinstance(
                        node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple) else [
                        (node.targets[0], node.value)]
                    for name, value in pairs:
                        if isinstance(name, ast.Name) and (part := _part_of(value, aliases)) is not None:
                            aliases[name.id] = part
                for target in _targets(node):
                    if (part := _written(target, aliases)) is not None:
                        found.append((module, target.lineno, part))
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in WRITING_METHODS
                        and (part := _part_of(node.func.value, aliases)) is not None):
                    found.append((module, node.lineno, part))
    return found


def test_each_part_of_the_exchange_is_written_only_by_its_stage() -> None:
    found = writes()
    wrong = [(module, line, part) for module, line, part in found if module not in WRITERS[part]]
    assert not wrong, wrong
    # the scan sees each stage's writes (a scan that found nothing would pass the assertion above)
    assert {part for _, _, part in found} == set(WRITERS)
    assert {module for module, _, part in found if part == "attempts"} == {"pipeline/send.py"}


def test_a_new_exchange_has_every_part_and_nothing_in_them() -> None:
    exchange = Exchange("r")
    assert (exchange.routed, exchange.admitted, exchange.attempts, exchange.answer) == (
        Routed(), Admitted(), Attempts(), Answer())
    assert exchange.failure is None and exchange.group is None and exchange.cache is None


def test_its_failure_is_the_error_answered_else_the_one_its_stream_ended_with() -> None:
    from ingress.errors import InvalidRequest, UpstreamUnavailable

    broke, refused = UpstreamUnavailable("broke", after_head=True), InvalidRequest("no")
    streamed = Exchange("r")
    streamed.answer.failure = broke
    both = Exchange("r", error=refused)
    both.answer.failure = broke
    assert (streamed.failure, both.failure) == (broke, refused)


def test_its_group_is_the_last_attempts_else_its_routes() -> None:
    exchange = Exchange("r", routed=Routed("m", group="main"))
    assert exchange.group == "main"
    exchange.attempts.group = "spare"
    assert exchange.group == "spare"


def test_the_answer_begins_once() -> None:
    answer = Answer()
    answer.began()
    first = answer.first_byte
    answer.began()
    assert first is not None and answer.first_byte == first


def test_settle_takes_the_lease_and_the_reservation_once() -> None:
    attempts, admitted = Attempts(lease=object()), Admitted(admission=object())  # type: ignore[arg-type]
    assert attempts.take() is not None and attempts.take() is None
    assert admitted.take() is not None and admitted.take() is None
