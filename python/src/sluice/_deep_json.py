"""Decoding a receive answer whose message bodies nest deeper than Python's JSON parser
follows (it raises ``RecursionError`` at about 1,000 levels).

Brokers refuse JSON bodies and results nested more than 64 levels, but a body stored before
that rule may still be delivered. A receive that raised would leave its whole batch leased
until the leases ran out, and raise again at the next receive; instead the answer is decoded
one message at a time, and a message whose body cannot be decoded is delivered with that
body as its exact JSON text in ``bytes`` and the reason in ``decode_error``
(:class:`sluice.models.Delivery`), so it can be settled like any other.

The slow path (a scan of the answer in Python) runs only after the fast one failed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

#: Set on a message's wire object whose body could not be decoded: ``(json_text, reason)``.
RAW_BODY = "\x00sluice_raw_body"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_STRUCTURE = re.compile(r'["\[\]{}]')
_SPACE = re.compile(r"[ \t\r\n]*")


def loads_receive_answer(content: bytes) -> Any:
    """A receive answer as JSON, with any message whose body is too deep to decode marked
    with :data:`RAW_BODY` instead of failing the whole answer.

    Raises ``ValueError`` for an answer that is not JSON."""
    try:
        return json.loads(content)
    except RecursionError:
        pass
    text = content.decode("utf-8")
    top, _ = _children(text, _skip(text, 0))
    answer: Dict[str, Any] = {}
    for key, start, end in top:
        if key == "messages":
            items, _ = _children(text, start)
            answer["messages"] = [_message(text[a:b]) for _, a, b in items]
        elif key is not None:
            answer[key] = json.loads(text[start:end])
    return answer


def _message(text: str) -> Dict[str, Any]:
    """One delivery's wire object; a body too deep to decode is kept as text."""
    try:
        return json.loads(text)
    except RecursionError as e:
        why = (
            f"the body nests deeper than Python's JSON parser follows ({e}); it is kept as "
            "its JSON text in bytes"
        )
    members, _ = _children(text, _skip(text, 0))
    out: Dict[str, Any] = {}
    for key, start, end in members:
        if key is None:
            continue
        if key == "body":
            try:
                out[key] = json.loads(text[start:end])
            except RecursionError:
                out[RAW_BODY] = (text[start:end], why)
        else:
            out[key] = json.loads(text[start:end])
    return out


def _skip(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not JSON whitespace."""
    m = _SPACE.match(text, i)
    return m.end() if m else i


def _children(text: str, start: int) -> Tuple[List[Tuple[Optional[str], int, int]], int]:
    """The direct children of the object or array opening at ``text[start]``, as
    ``(key, value_start, value_end)`` (``key`` ``None`` in an array), and the index after
    its closing bracket. Nothing is decoded but the keys."""
    if start >= len(text) or text[start] not in "[{":
        raise ValueError("expected a JSON object or array")
    is_object = text[start] == "{"
    out: List[Tuple[Optional[str], int, int]] = []
    i = start + 1
    while True:
        i = _skip(text, i)
        if i >= len(text):
            raise ValueError("the JSON text ends inside an object or array")
        c = text[i]
        if c in "]}":
            return out, i + 1
        if c == ",":
            i += 1
            continue
        key: Optional[str] = None
        if is_object:
            m = _STRING.match(text, i)
            if not m:
                raise ValueError(f"expected a key at offset {i}")
            key = json.loads(m.group())
            i = _skip(text, m.end())
            if text[i : i + 1] != ":":
                raise ValueError(f"expected ':' at offset {i}")
            i = _skip(text, i + 1)
        end = _value_end(text, i)
        out.append((key, i, end))
        i = end


def _value_end(text: str, i: int) -> int:
    """The index after the JSON value starting at ``text[i]``."""
    c = text[i : i + 1]
    if c == '"':
        m = _STRING.match(text, i)
        if not m:
            raise ValueError(f"an unterminated string at offset {i}")
        return m.end()
    if c not in ("[", "{"):
        j = i
        while j < len(text) and text[j] not in ",]} \t\r\n":
            j += 1
        return j
    depth = 0
    j = i
    while True:
        m = _STRUCTURE.search(text, j)
        if not m:
            raise ValueError("the JSON text ends inside an object or array")
        ch = m.group()
        if ch == '"':
            s = _STRING.match(text, m.start())
            if not s:
                raise ValueError(f"an unterminated string at offset {m.start()}")
            j = s.end()
            continue
        j = m.end()
        depth += 1 if ch in "[{" else -1
        if depth == 0:
            return j
