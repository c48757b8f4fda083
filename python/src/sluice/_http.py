"""One HTTP/1.1 keep-alive connection, for the calls of :mod:`._transport`.

Why not ``http.client`` for every call: it writes a request's head and body in two sends and
parses response headers with the ``email`` package, which together cost more CPU than the
rest of a call. The broker's answers are plain (a status line, a few headers, a body sized
by ``Content-Length`` or chunked), so reading them directly is short and exact; streams of
server-sent events still go through ``http.client``.
"""

from __future__ import annotations

import socket
import ssl
from typing import Dict, List, Optional, Tuple

__all__ = ["Connection", "ProtocolError"]

#: Longest status or header line read, and most header lines, before the answer is refused.
MAX_LINE = 64 * 1024
MAX_HEADERS = 100


class ProtocolError(Exception):
    """An answer that is not HTTP/1.1 as the broker speaks it."""


class Connection:
    """A connection to ``host:port`` (TLS when ``tls`` is given), opened by :meth:`connect`."""

    def __init__(self, host: str, port: int, tls: Optional[ssl.SSLContext]) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.sock: Optional[socket.socket] = None
        self._rfile = None
        self.host_header = (
            f"[{host}]" if ":" in host else host
        ) + ("" if port == (443 if tls else 80) else f":{port}")

    def connect(self, timeout: float) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._rfile = sock.makefile("rb")

    def close(self) -> None:
        if self._rfile is not None:
            self._rfile.close()
            self._rfile = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def exchange(self, head: bytes, body: Optional[bytes], method: str) -> Tuple[int, Dict[str, str], bytes, bool]:
        """Sends a request (``head`` ends with the blank line) and reads its answer: status,
        headers (lower-case names), body, and whether the connection must close after it."""
        assert self.sock is not None and self._rfile is not None, "connect first"
        self.sock.sendall(head + body if body else head)
        rfile = self._rfile
        while True:
            parts, status, headers = self._head()
            # Informational answers (100 Continue, 103 Early Hints) precede the real one.
            if not 100 <= status < 200 or status == 101:
                break
        close = headers.get("connection", "").lower() == "close" or parts[0] == b"HTTP/1.0"
        if method == "HEAD" or status in (204, 304):
            return status, headers, b"", close
        if "chunked" in headers.get("transfer-encoding", "").lower():
            data = self._chunked()
        elif "content-length" in headers:
            try:
                n = int(headers["content-length"])
            except ValueError:
                n = -1
            if n < 0:
                raise ProtocolError(f"Content-Length is not a size: {headers['content-length']!r}")
            data = rfile.read(n)
            if len(data) != n:
                raise ConnectionResetError("the answer's body was cut off")
        else:
            data = rfile.read()
            close = True
        return status, headers, data, close

    def _head(self) -> Tuple[List[bytes], int, Dict[str, str]]:
        """A status line and its headers."""
        rfile = self._rfile
        assert rfile is not None
        line = rfile.readline(MAX_LINE + 1)
        if not line:
            raise ConnectionResetError("the broker closed the connection without answering")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(line) > MAX_LINE:
            raise ProtocolError(f"not an HTTP/1.1 status line: {line[:100]!r}")
        try:
            status = int(parts[1])
        except ValueError:
            raise ProtocolError(f"not an HTTP status: {parts[1][:20]!r}") from None
        headers: Dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = rfile.readline(MAX_LINE + 1)
            if line in (b"\r\n", b"\n"):
                break
            if not line or len(line) > MAX_LINE:
                raise ProtocolError("the answer's headers are cut off or too long")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise ProtocolError(f"not a header line: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        else:
            raise ProtocolError(f"the answer has more than {MAX_HEADERS} headers")
        return parts, status, headers

    def _chunked(self) -> bytes:
        rfile = self._rfile
        assert rfile is not None
        out = bytearray()
        while True:
            line = rfile.readline(MAX_LINE + 1)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {line[:40]!r}") from None
            if size == 0:
                while rfile.readline(MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            chunk = rfile.read(size + 2)
            if len(chunk) != size + 2:
                raise ConnectionResetError("the answer's body was cut off")
            out += chunk[:size]
