"""The task envelope: the JSON body ``{"task": "<name>", "args": [...],
"kwargs": {...}}`` that every Sluice SDK reads and writes, so a task enqueued from Python runs
on a Rust worker and the other way round.

A Python handler is called ``f(*args, **kwargs)``. The Rust SDK maps one Rust value to the
envelope: a struct or map becomes ``kwargs``, a tuple or ``Vec`` becomes ``args``, a scalar
becomes a single argument, and ``()`` means no arguments. So for a Rust handler whose input
is a struct, enqueue with keyword arguments; for a tuple, with positional ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._transport import dumps
from .errors import InvalidInput
from .models import BodyKind

__all__ = ["EnvelopeError", "TaskEnvelope", "envelope_wire"]


class EnvelopeError(ValueError):
    """A body that is not a task envelope; the message says why (it is stored with the
    message when a worker moves it to the unprocessable queue)."""


@dataclass(frozen=True)
class TaskEnvelope:
    """Which task to run and its arguments."""

    task: str
    args: List[Any] = field(default_factory=list)
    kwargs: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        task: str,
        args: Optional[Sequence[Any]] = None,
        kwargs: Optional[Mapping[str, Any]] = None,
    ) -> "TaskEnvelope":
        """An envelope for ``task``, checked: a name, a sequence of arguments, keyword
        arguments with string keys, and values JSON can hold (refused with
        :class:`InvalidInput` otherwise, before anything is sent)."""
        wire = envelope_wire(task, args, kwargs)
        env = cls(task=task, args=wire["args"], kwargs=wire["kwargs"])
        env.to_json()
        return env

    def to_wire(self) -> Dict[str, Any]:
        """The envelope as a JSON object."""
        return {"task": self.task, "args": list(self.args), "kwargs": dict(self.kwargs)}

    def to_json(self) -> bytes:
        """The envelope as JSON text; :class:`InvalidInput` when an argument cannot be JSON."""
        return dumps(self.to_wire(), f"the arguments of task {self.task!r}")

    @classmethod
    def from_body(cls, body: Any, kind: Optional[BodyKind] = BodyKind.JSON) -> "TaskEnvelope":
        """Reads an envelope from a delivered body. Extra fields are allowed; ``args`` and
        ``kwargs`` may be absent.

        Raises :class:`EnvelopeError` for a body that is not an envelope."""
        if kind == BodyKind.BYTES:
            n = len(body) if isinstance(body, (bytes, bytearray)) else 0
            raise EnvelopeError(f"the body is {n} bytes of binary data, not a JSON task envelope")
        if kind == BodyKind.TEXT:
            raise EnvelopeError("the body is plain text, not a JSON task envelope")
        if not isinstance(body, dict):
            raise EnvelopeError(
                'the body is not a task envelope {"task", "args", "kwargs"}: '
                f"it is a JSON {_json_type(body)}"
            )
        task = body.get("task")
        if not isinstance(task, str):
            raise EnvelopeError(
                'the body is not a task envelope {"task", "args", "kwargs"}: '
                "it has no string field \"task\""
            )
        if not task:
            raise EnvelopeError("the envelope's task name is empty")
        args = body.get("args", [])
        kwargs = body.get("kwargs", {})
        if args is None:
            args = []
        if kwargs is None:
            kwargs = {}
        if not isinstance(args, list):
            raise EnvelopeError(f"the envelope's args is a JSON {_json_type(args)}, not an array")
        if not isinstance(kwargs, dict):
            raise EnvelopeError(f"the envelope's kwargs is a JSON {_json_type(kwargs)}, not an object")
        return cls(task=task, args=args, kwargs=kwargs)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def envelope_wire(
    task: str, args: Optional[Sequence[Any]], kwargs: Optional[Mapping[str, Any]]
) -> Dict[str, Any]:
    """The envelope of ``task`` as a JSON object, its shape checked (a name, a sequence of
    arguments, keyword arguments with string keys) but not yet whether JSON can hold the
    values: that is checked when the request is encoded, once."""
    if not isinstance(task, str) or not task:
        raise InvalidInput("a task needs a name: pass the name its handler was registered under")
    if args is None:
        args = []
    if type(args) not in (list, tuple) and (
        isinstance(args, (str, bytes, Mapping)) or not isinstance(args, Sequence)
    ):
        raise InvalidInput(
            f"the positional arguments of task {task!r} must be a list or tuple, "
            f"got {type(args).__name__}"
        )
    kw = dict(kwargs or {})
    for k in kw:
        if not isinstance(k, str):
            raise InvalidInput(f"keyword argument names of task {task!r} must be str, got {k!r}")
    return {"task": task, "args": list(args), "kwargs": kw}
