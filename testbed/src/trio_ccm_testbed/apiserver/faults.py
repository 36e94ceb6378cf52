"""Fault injection: latency, error responses, conflicts, garbage and truncated bodies,
refused connections.

Rules match requests by verb, resource (optionally `resource/subresource`), namespace and
name; each fires with a probability and, optionally, a limited number of times. Randomness
comes from an injected `random.Random`, so a seeded run is reproducible.

Body faults replace what a client reads, as a misbehaving proxy or a cut connection would:
- `garbage`: the answer is `body` (default: an HTML "502 Bad Gateway" page, as a proxy in
  front of an API server serves it) with status `code` (default 200) and `content_type`
  (default `text/html`);
- `truncate`: the real answer, status and headers kept, cut before its last byte half-way
  through (a JSON document that ends mid-value).
On a watch, `after_events` whole events go through first; then comes the garbage, or the
next event cut in half, and the stream ends.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import trio

from trio_ccm_testbed._http import Response

FaultAction = Literal["error", "latency", "conflict", "garbage", "truncate"]
ACTIONS = ("error", "latency", "conflict", "garbage", "truncate")
BODY_FAULTS = frozenset({"garbage", "truncate"})
BAD_GATEWAY_PAGE = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class FaultRule:
    action: FaultAction
    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    probability: float = 1.0
    count: int | None = None
    code: int = 500
    retry_after_s: int | None = None
    message: str | None = None
    delay_s: float = 0.0
    body: str | None = None
    content_type: str | None = None
    after_events: int = 0
    id: int = 0
    fired: int = 0

    def matches(
        self, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        if self.action == "conflict" and verb not in WRITE_VERBS:
            return False
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is not None:
            combined = f"{resource}/{subresource}" if subresource else resource
            if self.resource not in (resource, combined):
                return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        return self.name is None or self.name == name

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


_FIELDS = set(FaultRule.__dataclass_fields__) - {"id", "fired"}


class Faults:
    """The set of active fault rules, plus outages and watch drops."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()  # noqa: S311 - fault dice, not secrets
        self.rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self.refuse_until = float("-inf")
        # Set (and replaced) whenever an outage starts, so listeners can react.
        self.outage_started = trio.Event()
        self.outage_ended = trio.Event()

    def add(self, action: FaultAction, **options: Any) -> FaultRule:
        unknown = set(options) - _FIELDS
        if unknown:
            raise ValueError(f"unknown fault option(s): {', '.join(sorted(unknown))}")
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r}: use {', '.join(ACTIONS)}")
        if action == "garbage":
            options.setdefault("code", 200)
            options.setdefault("body", BAD_GATEWAY_PAGE)
            options.setdefault("content_type", "text/html")
        rule = FaultRule(action=action, id=next(self._ids), **options)
        if not 0.0 <= rule.probability <= 1.0:
            raise ValueError("probability must be between 0 and 1")
        if not isinstance(rule.after_events, int) or rule.after_events < 0:
            raise ValueError("after_events must be a whole number of events, 0 or more")
        self.rules.append(rule)
        return rule

    def inject_error(self, code: int = 500, **options: Any) -> FaultRule:
        return self.add("error", code=code, **options)

    def inject_latency(self, delay_s: float, **options: Any) -> FaultRule:
        return self.add("latency", delay_s=delay_s, **options)

    def inject_conflict(self, **options: Any) -> FaultRule:
        return self.add("conflict", **options)

    def inject_garbage(self, body: str | None = None, **options: Any) -> FaultRule:
        """Answer `body` (default: an HTML 502 page) instead of the real answer."""
        if body is not None:
            options["body"] = body
        return self.add("garbage", **options)

    def inject_truncation(self, **options: Any) -> FaultRule:
        """Cut the real answer (or, on a watch, an event) half-way through."""
        return self.add("truncate", **options)

    def remove(self, rule_id: int) -> None:
        self.rules = [r for r in self.rules if r.id != rule_id]

    def clear(self) -> None:
        self.rules.clear()
        self.end_outage()

    def refuse_connections(self, duration_s: float) -> None:
        """Refuse new connections (in-process: ConnectError) for `duration_s` seconds."""
        self.refuse_until = trio.current_time() + duration_s
        self.outage_started.set()
        self.outage_started = trio.Event()

    def end_outage(self) -> None:
        """End an injected outage now (the listener re-binds at once)."""
        self.refuse_until = float("-inf")
        self.outage_ended.set()
        self.outage_ended = trio.Event()

    def refusing(self) -> bool:
        return trio.current_time() < self.refuse_until

    def pick(
        self, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> list[FaultRule]:
        """The rules that fire for this request (each consumes one of its count)."""
        fired: list[FaultRule] = []
        for rule in self.rules:
            if not rule.matches(verb, resource, subresource, namespace, name):
                continue
            if rule.probability < 1.0 and self.rng.random() >= rule.probability:
                continue
            if rule.count is not None:
                rule.count -= 1
            rule.fired += 1
            fired.append(rule)
        return fired


# -- body faults applied to responses ----------------------------------------------------
def corrupt(response: Response, rule: FaultRule) -> Response:
    """`response` as a body fault makes the client read it."""
    if isinstance(response.body, bytes):
        if rule.action == "garbage":
            return Response(
                rule.code,
                (rule.body or "").encode(),
                [("content-type", rule.content_type or "text/html")],
                response.cleanup,
            )
        cut = response.body[: len(response.body) // 2]
        return Response(response.status, cut, response.headers, response.cleanup)
    return Response(
        response.status,
        _corrupt_stream(response.body, rule),
        response.headers,
        response.cleanup,
    )


async def _corrupt_stream(chunks: AsyncIterator[bytes], rule: FaultRule) -> AsyncIterator[bytes]:
    """Pass `after_events` whole lines, then the garbage or half of the next line; end."""
    passed = 0
    pending = b""
    try:
        async for chunk in chunks:
            pending += chunk
            out = b""
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if passed < rule.after_events:
                    out += line + b"\n"
                    passed += 1
                    continue
                if rule.action == "garbage":
                    out += (rule.body or "").encode()
                else:
                    out += line[: len(line) // 2]
                yield out
                return
            if out:
                yield out
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
