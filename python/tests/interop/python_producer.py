"""The Python side of "a Python producer, a Rust worker": calls tasks a Rust worker runs
(request/reply over the queue) and checks every answer; exits non-zero on a mismatch.

    python python_producer.py URL QUEUE
"""

from __future__ import annotations

import json
import sys

import sluice


def main(url: str, queue: str) -> int:
    client = sluice.Client(url)
    checks = []
    # A tuple input on the Rust side: positional arguments.
    checks.append(("mul", client.call(queue, "mul", [6, 7], timeout=30), 42))
    # A struct input: keyword arguments.
    checks.append((
        "resize",
        client.call(queue, "resize", kwargs={"url": "s3://cat.png", "width": 64}, timeout=30),
        {"url": "s3://cat.png", "width": 64, "by": "rust"},
    ))
    # A scalar input: one positional argument.
    checks.append(("shout", client.call(queue, "shout", ["hi"], timeout=30), "HI!"))
    # No arguments.
    checks.append(("ping", client.call(queue, "ping", timeout=30), "pong"))
    # A permanent error raised by the Rust handler comes back as FAILURE with its message.
    try:
        client.call(queue, "resize", kwargs={"url": "s3://x", "width": 0}, timeout=30)
        checks.append(("resize width 0", "succeeded", "TaskFailed"))
    except sluice.TaskFailed as e:
        checks.append(("resize width 0", (e.status, e.error), ("FAILURE", "width must be positive, got 0")))
    # A Python value JSON cannot hold never reaches the Rust worker.
    try:
        client.enqueue(queue, "mul", [float("nan"), 1])
        checks.append(("nan", "sent", "InvalidInput"))
    except sluice.InvalidInput:
        checks.append(("nan", "refused", "refused"))
    bad = [(name, got, want) for name, got, want in checks if got != want]
    print(json.dumps({"checked": len(checks), "mismatches": [[n, repr(g), repr(w)] for n, g, w in bad]}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
