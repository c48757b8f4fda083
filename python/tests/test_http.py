"""The SDK's HTTP/1.1 connection against canned answers: the framings a server may use,
and answers that are cut off or not HTTP."""

from __future__ import annotations

import socket
import threading
from typing import List

import pytest

import sluice
from sluice import TransportError


def serve(answers: List[bytes]) -> str:
    """A one-connection server that reads a request head (and its body) per answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            buf = b""
            for answer in answers:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                conn.sendall(answer)

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_sized_chunked_and_closing_answers_are_read_whole() -> None:
    url = serve([
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n{\"name\":\"q1\"}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[\"a\",\r\n4;x=1\r\n\"b\"]\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye",
    ])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none())
    t = c._t
    assert t.request("GET", "/a", idempotent=True).json() == {"name": "q1"}
    assert t.request("GET", "/b", idempotent=True).json() == ["a", "b"]
    assert t.request("GET", "/c", idempotent=True).content == b"ok", "informational answers are skipped"
    assert t.request("GET", "/d", idempotent=True).content == b"bye"


def test_an_answer_that_is_not_http_is_a_transport_error() -> None:
    url = serve([b"SSH-2.0-OpenSSH\r\n\r\n"])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none())
    with pytest.raises(TransportError) as e:
        c.list_queues()
    assert "status line" in str(e.value)


def test_a_negative_content_length_is_refused() -> None:
    url = serve([b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none(), timeout=5)
    with pytest.raises(TransportError) as e:
        c.list_queues()
    assert "Content-Length" in str(e.value)


def test_a_connection_closed_before_the_answer_is_a_transport_error() -> None:
    url = serve([b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort"])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none())
    with pytest.raises(TransportError) as e:
        c.list_queues()
    assert "cut off" in str(e.value)


def test_error_answers_keep_their_code_and_retry_after() -> None:
    body = b'{"error":{"code":"queue_full","message":"the queue is full"}}'
    url = serve([b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)])
    c = sluice.Client(url, retry=sluice.RetryPolicy.none())
    with pytest.raises(sluice.ApiError) as e:
        c.send("q", 1)
    assert e.value.code is sluice.ErrorCode.QUEUE_FULL and e.value.retry_after == 3.0


def test_header_values_with_line_breaks_are_refused() -> None:
    with pytest.raises(sluice.InvalidInput):
        sluice.Client("http://127.0.0.1:9", token="abc\r\nX-Evil: 1")
    c = sluice.Client("http://127.0.0.1:9")
    with pytest.raises(sluice.InvalidInput):
        c.send("q", 1, idempotency_key="k\r\nX-Evil: 1")
