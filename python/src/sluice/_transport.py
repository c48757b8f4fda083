"""The one request loop every call goes through: build, send, map the answer (or error
envelope), and retry by the rules below.

Why these rules: a retry is only harmless when repeating the request cannot do its effect
twice. So each call says whether it is *idempotent* (reads; settings; settlements, whose
receipt names one delivery; sends with an ``Idempotency-Key`` or a ``dedup_id``) or not (a
plain send, a purge). Idempotent calls are retried on connection failures, timeouts, 503 and
429; the others only when the broker was never reached. Waits grow exponentially with full
jitter, so clients that failed together do not come back together; a ``Retry-After`` from
the broker is a floor on the wait, and one longer than ``max_retry_after`` returns the error
at once rather than blocking the caller for minutes. These are the Rust SDK's rules.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import time
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import httpx

from .errors import ApiError, ErrorCode, InvalidInput, TransportError, code_for_status

__all__ = ["RetryPolicy", "Transport", "dumps"]


@dataclass(frozen=True)
class RetryPolicy:
    """How calls are retried. The default makes up to 4 attempts, waiting about 0.1 s,
    0.2 s, 0.4 s (jittered) between them, and follows ``Retry-After`` up to 10 s."""

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    max_retry_after: float = 10.0

    @classmethod
    def none(cls) -> "RetryPolicy":
        """No retries: every call is attempted once."""
        return cls(max_attempts=1)

    def backoff(self, attempt: int) -> float:
        """The jittered wait (seconds) after the ``attempt``-th failure (1-based)."""
        cap = min(self.max_backoff, self.initial_backoff * (2 ** min(max(attempt - 1, 0), 30)))
        return random.uniform(0.0, cap) if cap > 0 else 0.0


def dumps(value: Any, what: str = "the body") -> bytes:
    """Strict JSON: NaN, infinities and values JSON cannot hold are refused with
    :class:`InvalidInput` naming ``what``, before anything is sent."""
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise InvalidInput(
            f"{what} cannot be sent as JSON: {e}. Pass plain JSON values (dict with str keys, "
            "list, str, int, finite float, bool, None), or convert the value first "
            "(e.g. a dataclass with dataclasses.asdict, a datetime with .isoformat())"
        ) from e


_NO_BODY = object()


def tls_context(
    ca_cert: Optional[str], client_cert: Optional[str], client_key: Optional[str]
) -> "ssl.SSLContext | bool":
    """The TLS settings of a client: the system's roots, plus ``ca_cert`` (a PEM file of CA
    certificates: a private CA or a broker's self-signed certificate), plus a client
    certificate for a broker that requires one. Each falls back to its environment
    variable (``SLUICE_CA_CERT``, ``SLUICE_CLIENT_CERT``, ``SLUICE_CLIENT_KEY``), as with the
    ``sluice`` command line. ``True`` (httpx's default verification) when none is set."""
    ca_cert = ca_cert or os.environ.get("SLUICE_CA_CERT") or None
    client_cert = client_cert or os.environ.get("SLUICE_CLIENT_CERT") or None
    client_key = client_key or os.environ.get("SLUICE_CLIENT_KEY") or None
    if not (ca_cert or client_cert or client_key):
        return True
    if bool(client_cert) != bool(client_key):
        raise InvalidInput(
            "a client certificate needs its key: give both client_cert and client_key "
            "(SLUICE_CLIENT_CERT and SLUICE_CLIENT_KEY), or neither"
        )
    ctx = ssl.create_default_context()
    try:
        if ca_cert:
            ctx.load_verify_locations(cafile=ca_cert)
        if client_cert:
            ctx.load_cert_chain(certfile=client_cert, keyfile=client_key)
    except (OSError, ssl.SSLError) as e:
        which = "ca_cert (SLUICE_CA_CERT)" if ca_cert and not client_cert else "TLS files"
        raise InvalidInput(
            f"{which} cannot be used: {e}. Give PEM files: the CA certificate(s) to trust, "
            "and the client certificate chain with its private key"
        ) from e
    return ctx


class Transport:
    """An HTTP connection pool to one broker with the retry rules of this module.
    Thread-safe: every thread of a worker shares one."""

    def __init__(
        self,
        base_url: str,
        *,
        token: Optional[str],
        timeout: float,
        connect_timeout: float,
        retry: RetryPolicy,
        user_agent: str,
        ca_cert: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
    ) -> None:
        base = base_url.rstrip("/")
        url = httpx.URL(base)
        if url.scheme not in ("http", "https") or not url.host:
            raise InvalidInput(
                f"broker URL {base_url!r} must start with http:// or https:// and name a host, "
                "like http://127.0.0.1:7878"
            )
        self.base_url = base
        self.retry = retry
        self.timeout = timeout
        self._connect_timeout = connect_timeout
        headers = {"user-agent": user_agent}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            verify=tls_context(ca_cert, client_cert, client_key),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        json_body: Any = _NO_BODY,
        content: Optional[bytes] = None,
        content_type: Optional[str] = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        extra_timeout: float = 0.0,
    ) -> httpx.Response:
        """Sends one call, retrying by the module's rules; answers the 2xx response.

        Raises :class:`ApiError` for an error answer and :class:`TransportError` when the
        broker could not be reached or did not answer."""
        hdrs: Dict[str, str] = dict(headers or {})
        body: Optional[bytes] = content
        if json_body is not _NO_BODY:
            body = dumps(json_body, "the request")
            hdrs["content-type"] = "application/json"
        elif content_type is not None:
            hdrs["content-type"] = content_type
        query = {
            k: [_param(x) for x in v] if isinstance(v, list) else _param(v)
            for k, v in (params or {}).items()
            if v is not None
        }
        timeout = httpx.Timeout(self.timeout + extra_timeout, connect=self._connect_timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._http.request(
                    method, path, content=body, params=query, headers=hdrs, timeout=timeout
                )
            except httpx.HTTPError as e:
                err: Exception = _transport_error(e, self.base_url)
            else:
                if resp.status_code < 300:
                    return resp
                err = api_error(resp)
            wait = self._next_wait(attempt, idempotent, err)
            if wait is None:
                raise err
            time.sleep(wait)

    def stream(self, method: str, path: str) -> "httpx._client.StreamContextManager":  # type: ignore[name-defined]
        """Opens a streamed response (server-sent events); no read timeout."""
        return self._http.stream(
            method, path, timeout=httpx.Timeout(None, connect=self._connect_timeout)
        )

    def _next_wait(self, attempt: int, idempotent: bool, err: Exception) -> Optional[float]:
        if attempt >= self.retry.max_attempts:
            return None
        if isinstance(err, TransportError):
            retryable = err.connect or idempotent
        elif isinstance(err, ApiError):
            retryable = idempotent and err.transient
        else:
            retryable = False
        if not retryable:
            return None
        wait = self.retry.backoff(attempt)
        ra = err.retry_after if isinstance(err, ApiError) else None
        if ra is not None:
            if ra > self.retry.max_retry_after:
                return None
            wait = max(wait, ra)
        return wait


def _param(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _transport_error(e: httpx.HTTPError, base: str) -> TransportError:
    connect = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
    if isinstance(e, httpx.TimeoutException) and not connect:
        what = "request timed out"
    elif connect:
        what = "could not connect to the broker"
    else:
        what = "the exchange with the broker failed"
    return TransportError(f"{what} at {base}: {e}", connect=connect)


def api_error(resp: httpx.Response) -> ApiError:
    """The error of a non-2xx answer, from its envelope (or its status, without one)."""
    status = resp.status_code
    retry_after: Optional[float] = None
    ra = resp.headers.get("retry-after")
    if ra is not None:
        try:
            retry_after = float(int(ra.strip()))
        except ValueError:
            retry_after = None
    try:
        err = resp.json()["error"]
        code = ErrorCode.parse(str(err["code"]), status)
        message = str(err["message"])
    except (ValueError, KeyError, TypeError):
        code = code_for_status(status)
        message = resp.text[:500] or f"HTTP {status}"
    return ApiError(status, code, message, retry_after)
