"""Fixtures: real ``sluice serve`` processes on ephemeral loopback ports over temporary data
directories. The broker binary comes from ``SLUICE_BIN`` (``cargo test -p sluice --test
python`` sets it), or ``sluice`` on the ``PATH``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional

import pytest

import sluice


def _binary() -> str:
    path = os.environ.get("SLUICE_BIN") or shutil.which("sluice")
    if not path:
        msg = "no sluice binary: set SLUICE_BIN (cargo test -p sluice --test python does)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


class Broker:
    """A ``sluice serve`` child over its own data directory; restartable on the same port."""

    def __init__(self, binary: str, data_dir: Path, args: Optional[list] = None) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.args = [str(a) for a in (args or [])]
        self.log = data_dir.parent / f"{data_dir.name}.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.url = ""
        self.port = 0

    def start(self) -> "Broker":
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env["RUST_LOG"] = "warn"
        listen = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 15
        while True:
            with open(self.log, "ab") as log:
                proc = subprocess.Popen(
                    [self.binary, "serve", "--listen", listen, "--data-dir", str(self.data_dir),
                     *self.args],
                    stdout=subprocess.PIPE, stderr=log, env=env,
                )
            assert proc.stdout is not None
            line = proc.stdout.readline().decode().strip()
            if line.startswith("sluice listening on "):
                break
            proc.wait(5)
            if self.port == 0 or time.monotonic() > deadline:
                raise RuntimeError(f"sluice serve did not start: {line!r}; see {self.log}")
            time.sleep(0.2)  # the old process's port is not free yet
        self.proc = proc
        self.url = line[len("sluice listening on "):]
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        """SIGKILL: the broker dies without a chance to do anything."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self, **kw: object) -> sluice.Client:
        return sluice.Client(self.url, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def sluice_bin() -> str:
    return _binary()


@pytest.fixture(scope="session")
def broker(sluice_bin: str) -> Iterator[Broker]:
    """One broker shared by the tests of a session; each test uses its own queues."""
    with tempfile.TemporaryDirectory(prefix="sluice-py-") as d:
        b = Broker(sluice_bin, Path(d) / "data").start()
        yield b
        b.kill()


@pytest.fixture
def own_broker(sluice_bin: str) -> Iterator[Broker]:
    """A broker of this test alone (to be killed and restarted)."""
    with tempfile.TemporaryDirectory(prefix="sluice-py-") as d:
        b = Broker(sluice_bin, Path(d) / "data").start()
        yield b
        b.kill()


@pytest.fixture
def client(broker: Broker) -> Iterator[sluice.Client]:
    c = broker.client()
    yield c
    c.close()


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses."""
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}"


def wait_until(cond, timeout: float = 10.0, every: float = 0.02, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
