"""Checking ``Sluice-Signature`` on push requests: what an endpoint written in Python does
before it trusts a request from a queue's push target.

The header reads ``t=<unix seconds>,v1=<hex>``; the hex is HMAC-SHA256, keyed with the
target's secret, of the timestamp's digits, a ``.``, and the request body's exact bytes::

    from sluice.push import verify_signature

    def handle(request):
        if not verify_signature(SECRET, request.headers["Sluice-Signature"], request.body):
            return 401
        ...
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Optional, Union

HEADER = "Sluice-Signature"


def sign(secret: Union[str, bytes], unix_seconds: int, body: bytes) -> str:
    """The header value the broker sends for ``body`` at ``unix_seconds`` (for tests)."""
    key = secret.encode() if isinstance(secret, str) else secret
    mac = hmac.new(key, str(unix_seconds).encode() + b"." + body, hashlib.sha256)
    return f"t={unix_seconds},v1={mac.hexdigest()}"


def verify_signature(
    secret: Union[str, bytes],
    header: Optional[str],
    body: bytes,
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """True when ``header`` signs ``body`` with ``secret`` and was made within ``tolerance``
    seconds of ``now`` (default: the current time), so a captured request cannot be replayed
    later. Compares in constant time."""
    if not header:
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    t: Optional[int] = None
    sigs = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            try:
                t = int(value)
            except ValueError:
                return False
        elif name == "v1":
            sigs.append(value)
    if t is None:
        return False
    if abs((time.time() if now is None else now) - t) > tolerance:
        return False
    expected = hmac.new(key, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, s) for s in sigs)
