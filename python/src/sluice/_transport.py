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

import http.client
import json
import os
import random
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union
from urllib.parse import quote, urlencode, urlsplit

from ._http import Connection, ProtocolError
from .errors import ApiError, ErrorCode, InvalidInput, TransportError, code_for_status

__all__ = ["Response", "RetryPolicy", "Transport", "dumps"]


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
    ``sluice`` command line. ``True`` (the system's roots only) when none is set."""
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


class Response:
    """A whole answer: its status, headers and body."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.content)


class Stream:
    """A streamed answer (server-sent events) on a connection of its own, closed with it."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status_code = resp.status
        self.headers = resp.headers
        self.content = b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def read(self) -> bytes:
        self.content = self._resp.read()
        return self.content

    def iter_lines(self) -> Iterator[str]:
        """The body's lines without their line ends, as they arrive."""
        while True:
            line = self._resp.readline()
            if not line:
                return
            yield line.decode("utf-8", "replace").rstrip("\r\n")

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._conn.close()


class Transport:
    """A pool of HTTP/1.1 keep-alive connections to one broker with the retry rules of this
    module. Thread-safe: every thread of a worker shares one, each request holding a
    connection of its own for its duration.

    Why its own connections (``_http.py``) rather than a richer HTTP client: a call's cost
    in Python is mostly the client's own code, and this is the leanest correct one (a
    quarter of ``httpx``'s CPU per call, half of ``http.client``'s; see the SDK's docs). It
    reaches the broker directly: proxy variables (``HTTP_PROXY``) are not read."""

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
        try:
            url = urlsplit(base)
            port = url.port
        except ValueError:
            url, port = None, None
        if url is None or url.scheme not in ("http", "https") or not url.hostname:
            raise InvalidInput(
                f"broker URL {base_url!r} must start with http:// or https:// and name a host, "
                "like http://127.0.0.1:7878"
            )
        self.base_url = base
        self.retry = retry
        self.timeout = timeout
        self._connect_timeout = connect_timeout
        self._host = url.hostname
        self._port = port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._tls: Optional[ssl.SSLContext] = None
        if url.scheme == "https":
            ctx = tls_context(ca_cert, client_cert, client_key)
            self._tls = ctx if isinstance(ctx, ssl.SSLContext) else ssl.create_default_context()
        self._headers: Dict[str, str] = {"user-agent": user_agent, "accept": "application/json"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        for name, value in self._headers.items():
            if "\r" in value or "\n" in value:
                raise InvalidInput(f"the {name} header cannot hold a line break")
        self._idle: List[Connection] = []
        # What every request's head carries.
        host = Connection(self._host, self._port, self._tls).host_header
        self._head = f"host: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self._headers.items())
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- connections -----------------------------------------------------------------------

    def _take(self) -> Connection:
        """An idle connection the broker has not closed, or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Connection(self._host, self._port, self._tls)
            if _usable(conn.sock):
                return conn
            conn.close()

    def _give_back(self, conn: Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _open(self, conn: Connection, read_timeout: Optional[float]) -> None:
        """Connects a new connection (a connect error) and sets the read timeout."""
        if conn.sock is None:
            try:
                conn.connect(self._connect_timeout)
            except OSError as e:
                conn.close()
                raise _transport_error(e, self.base_url, connect=True) from e
        assert conn.sock is not None
        conn.sock.settimeout(read_timeout)

    def _target(self, path: str, params: Optional[Mapping[str, Any]]) -> str:
        target = self._prefix + path
        query = [
            (k, _param(x))
            for k, v in (params or {}).items()
            if v is not None
            for x in (v if isinstance(v, list) else [v])
        ]
        return f"{target}?{urlencode(query, quote_via=quote)}" if query else target

    # -- requests --------------------------------------------------------------------------

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
    ) -> Response:
        """Sends one call, retrying by the module's rules; answers the 2xx response.

        Raises :class:`ApiError` for an error answer and :class:`TransportError` when the
        broker could not be reached or did not answer."""
        body: Optional[bytes] = content
        lines = [self._head]
        if json_body is not _NO_BODY:
            body = dumps(json_body, "the request")
            lines.append("content-type: application/json\r\n")
        elif content_type is not None:
            lines.append(f"content-type: {content_type}\r\n")
        for name, value in (headers or {}).items():
            if "\r" in value or "\n" in value:
                raise InvalidInput(f"the {name} header cannot hold a line break: {value!r}")
            lines.append(f"{name}: {value}\r\n")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"content-length: {len(body or b'')}\r\n")
        lines.append("\r\n")
        head = f"{method} {self._target(path, params)} HTTP/1.1\r\n{''.join(lines)}".encode()
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._exchange(method, head, body, self.timeout + extra_timeout)
            except TransportError as e:
                err: Exception = e
            else:
                if resp.status_code < 300:
                    return resp
                err = api_error(resp)
            wait = self._next_wait(attempt, idempotent, err)
            if wait is None:
                raise err
            time.sleep(wait)

    def _exchange(self, method: str, head: bytes, body: Optional[bytes], timeout: float) -> Response:
        conn = self._take()
        self._open(conn, timeout)
        try:
            status, headers, data, close = conn.exchange(head, body, method)
        except (OSError, ProtocolError) as e:
            conn.close()
            raise _transport_error(e, self.base_url, connect=False) from e
        if close:
            conn.close()
        else:
            self._give_back(conn)
        return Response(status, headers, data)

    def stream(self, method: str, path: str) -> Stream:
        """Opens a streamed response (server-sent events) on a connection of its own; no
        read timeout."""
        if self._tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=self._tls
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise _transport_error(e, self.base_url, connect=True) from e
        try:
            assert conn.sock is not None
            conn.sock.settimeout(None)
            conn.request(method, self._target(path, None), headers=self._headers)
            return Stream(conn, conn.getresponse())
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise _transport_error(e, self.base_url, connect=False) from e

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


#: Most idle keep-alive connections a transport keeps (a worker's threads, its lease loop
#: and its acks each hold one while they call).
MAX_IDLE = 256


def _usable(sock: Optional[socket.socket]) -> bool:
    """Whether an idle connection may carry another request: the broker has not closed it
    (a readable idle socket means an end of stream or bytes nobody asked for)."""
    if sock is None:
        return True
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _param(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _transport_error(e: BaseException, base: str, *, connect: bool) -> TransportError:
    if connect and isinstance(e, (socket.timeout, TimeoutError)):
        what = "timed out connecting to the broker"
    elif connect:
        what = "could not connect to the broker"
    elif isinstance(e, (socket.timeout, TimeoutError)):
        what = "request timed out"
    else:
        what = "the exchange with the broker failed"
    return TransportError(f"{what} at {base}: {e}", connect=connect)


def api_error(resp: Union[Response, Stream]) -> ApiError:
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
