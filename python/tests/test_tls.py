"""The client over TLS: a broker with a certificate from a private CA, trusted through
``ca_cert`` or ``SLUICE_CA_CERT``, and a broker that requires client certificates. The
certificates are made by the ``openssl`` command line for each test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

import sluice
from sluice.errors import InvalidInput, TransportError

from conftest import Broker


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _sign(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
             cwd=d)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN={name}", cwd=d)


@pytest.fixture(scope="module")
def pki() -> Iterator[Path]:
    """A server CA with a certificate for localhost, and a client CA with one client."""
    if shutil.which("openssl") is None:
        msg = "no openssl command: it makes the test certificates (apt-get install openssl)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    with tempfile.TemporaryDirectory(prefix="sluice-pki-") as t:
        d = Path(t)
        _ca(d, "ca")
        _sign(d, "server", "ca",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        _ca(d, "clients")
        _sign(d, "worker", "clients", "extendedKeyUsage=clientAuth\n")
        yield d


def _tls_broker(sluice_bin: str, d: Path, *extra: str) -> Broker:
    data = Path(tempfile.mkdtemp(prefix="sluice-py-tls-")) / "data"
    return Broker(sluice_bin, data, [
        "--tls-cert", d / "server.pem", "--tls-key", d / "server-key.pem", *extra,
    ]).start()


def _local(url: str) -> str:
    """The broker's URL by the name its certificate carries."""
    return url.replace("127.0.0.1", "localhost")


def test_https_with_a_private_ca(sluice_bin: str, pki: Path, queue: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    b = _tls_broker(sluice_bin, pki)
    try:
        assert b.url.startswith("https://")
        url = _local(b.url)
        with sluice.Client(url, ca_cert=str(pki / "ca.pem")) as c:
            c.put_queue(queue)
            c.send(queue, {"over": "tls"})
            [d] = c.receive(queue, max=1)
            assert d.body == {"over": "tls"}
            c.ack(queue, d.receipt)
        with sluice.Client(url, retry=sluice.RetryPolicy.none()) as c:
            with pytest.raises(TransportError) as e:
                c.list_queues()
            assert "certificate" in str(e.value).lower()
        monkeypatch.setenv("SLUICE_CA_CERT", str(pki / "ca.pem"))
        with sluice.Client(url) as c:
            assert queue in {q.name for q in c.list_queues()}, "SLUICE_CA_CERT is read"
        monkeypatch.setenv("SLUICE_CA_CERT", str(pki / "missing.pem"))
        with pytest.raises(InvalidInput) as bad:
            sluice.Client(url)
        assert "SLUICE_CA_CERT" in str(bad.value)
    finally:
        b.kill()


def test_client_certificates(sluice_bin: str, pki: Path, queue: str) -> None:
    b = _tls_broker(sluice_bin, pki, "--tls-client-ca", pki / "clients.pem")
    try:
        url = _local(b.url)
        ca = str(pki / "ca.pem")
        with sluice.Client(url, ca_cert=ca, retry=sluice.RetryPolicy.none()) as c:
            with pytest.raises(TransportError):
                c.list_queues()
        with sluice.Client(url, ca_cert=ca, client_cert=str(pki / "worker.pem"),
                           client_key=str(pki / "worker-key.pem")) as c:
            c.put_queue(queue)
            assert queue in {q.name for q in c.list_queues()}
        with pytest.raises(InvalidInput):
            sluice.Client(url, ca_cert=ca, client_cert=str(pki / "worker.pem"))
    finally:
        b.kill()
