"""A broker with many queues: how fast the next queue is created as their number grows, how
long a restart takes, the memory per idle queue, and what a listing and a `/metrics` scrape
cost.

Starts `sluice serve` on a fresh store (the embedded engine in a temporary directory, or with
``--store postgres://…`` a fresh schema), creates ``--queues`` queues one request at a time
over one keep-alive connection (each with its dead-letter queue off, so one create is one
queue), and reports the create rate of every tenth of them; then stops the broker, starts it
again on the same store and times it until it answers ``/readyz``; then times a listing and
a scrape, and a page of the overview (`/v1/stats`, 1,000 queues with their stats)::

    cargo build --release
    python3 benchmarks/many-queues/many_queues.py --sluice-bin target/release/sluice --queues 100000
    python3 benchmarks/many-queues/many_queues.py --store 'postgres://postgres@127.0.0.1:5432/test?schema=manyq'
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary: str, port: int, store_args: list) -> subprocess.Popen:
    proc = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", *store_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc


def wait_ready(port: int, timeout: float = 120.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return time.monotonic() - began
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit("the broker did not become ready")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed_get(port: int, path: str) -> tuple:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    began = time.monotonic()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    return time.monotonic() - began, r.status, len(body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice-bin", default="target/release/sluice")
    p.add_argument("--queues", type=int, default=100_000)
    p.add_argument("--store", help="a PostgreSQL URL; default: the embedded engine in a temp dir")
    args = p.parse_args()
    port = free_port()
    data = tempfile.mkdtemp(prefix="many-queues-")
    store_args = ["--store", args.store] if args.store else ["--data-dir", data]
    proc = start(args.sluice_bin, port, store_args)
    wait_ready(port)
    base_rss = rss_mib(proc.pid)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"max_receive_count": 0, "dead_letter_queue": None})
    step = max(args.queues // 10, 1)
    began = block = time.monotonic()
    for i in range(args.queues):
        conn.request("PUT", f"/v1/queues/tenant-{i:07d}", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        if r.status not in (200, 201):
            raise SystemExit(f"create {i}: HTTP {r.status}")
        if (i + 1) % step == 0:
            now = time.monotonic()
            print(json.dumps({"queues": i + 1, "creates_per_sec": round(step / (now - block))}), flush=True)
            block = now
    total = time.monotonic() - began
    rss = rss_mib(proc.pid)
    print(json.dumps({
        "queues": args.queues,
        "create_all_s": round(total, 1),
        "rss_mib": round(rss, 1),
        "rss_per_queue_bytes": round((rss - base_rss) * 1024 * 1024 / args.queues),
    }), flush=True)
    for path in [
        "/v1/queues?limit=100",
        "/v1/queues?prefix=tenant-00500&limit=100",
        "/v1/stats",
        "/metrics",
        "/metrics",
    ]:
        took, status, size = timed_get(port, path)
        print(json.dumps({"get": path, "status": status, "ms": round(took * 1000, 1), "bytes": size}), flush=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    proc = start(args.sluice_bin, port, store_args)
    ready = wait_ready(port)
    print(json.dumps({"restart_to_ready_s": round(ready, 2), "rss_mib_after_restart": round(rss_mib(proc.pid), 1)}), flush=True)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    began = time.monotonic()
    n = 1000
    for i in range(n):
        conn.request("PUT", f"/v1/queues/later-{i:05d}", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
    print(json.dumps({"creates_per_sec_after_restart": round(n / (time.monotonic() - began))}), flush=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    if not args.store:
        import shutil

        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
