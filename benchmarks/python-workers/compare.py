"""Sluice's Python worker side by side with Celery, Dramatiq and RQ on Redis, on the same tasks.

Each system gets a broker of its own, started fresh for each workload and durable: Sluice's
embedded store (every write fsynced) and a Redis started here with ``appendonly yes``,
``appendfsync always`` (broker and result store of Celery, Dramatiq and RQ;
``--redis-fsync everysec`` or ``none`` for Redis's weaker settings). Celery runs with late acks
and a thread pool (``celery_app.py``), Dramatiq with one process of N threads and its Results
middleware (``dramatiq_app.py``), RQ as ``rq worker-pool`` of N workers, each forking a work
horse per job (``rq_app.py``), Sluice with its Python worker; all run the same task code
(``tasks_common.py``), which records when each task finished.

Workloads (``--workloads``):

* ``trivial``: N tasks that do nothing, enqueued one call at a time, then drained by one
  worker of concurrency 16;
* ``sleep``: N tasks that sleep 10 ms, concurrency 64;
* ``retry``: N trivial tasks, every tenth failing its first attempt (retried at once);
* ``latency``: with the worker running, 2,000 trivial tasks enqueued at a steady 200 a
  second: enqueue-to-done time, p50 and p99;
* ``kill``: 3,000 tasks of 2 ms; the broker is killed with SIGKILL when a third have finished
  and restarted on its data: how many tasks never finish, how many ran twice.

Figures: enqueue rate (one call at a time), drain throughput (from the first task finished
to the last), CPU per task of the worker (all its processes) and of the broker, and latency::

    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install -e python -r benchmarks/python-workers/requirements.txt
    cargo build --release
    /tmp/bench/bin/python benchmarks/python-workers/compare.py --sluice-bin target/release/sluice \
        --systems sluice,celery,dramatiq,rq
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Set

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
SYSTEMS = ("sluice", "celery", "dramatiq", "rq")


def stat_fields(pid: int) -> List[str]:
    """The fields of /proc/<pid>/stat after the command name, from the state on."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICK


def process_tree(pid: int) -> List[int]:
    """A process and its live descendants (Dramatiq's command starts worker processes, RQ's
    worker pool starts workers that fork a process per job)."""
    children: Dict[int, List[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(stat_fields(int(entry.name))[1]), []).append(int(entry.name))
            except OSError:
                pass  # exited meanwhile
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants, live or exited and waited for."""
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = stat_fields(p)
        except OSError:
            continue  # exited meanwhile
        total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def stop_worker(worker: subprocess.Popen) -> None:
    """SIGKILL to a worker and all its processes, stopped first so that none starts another."""
    stopped: Set[int] = set()
    while True:
        new = set(process_tree(worker.pid)) - stopped
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        stopped |= new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    worker.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A broker process of one system, on its own port and directory; restartable."""

    def __init__(
        self, system: str, sluice_bin: str, redis_bin: str, workdir: Path, port: int, fsync: str = "always"
    ) -> None:
        self.system = system
        self.dir = Path(tempfile.mkdtemp(prefix=f"{system}-", dir=workdir))
        if system == "sluice":
            self.cmd = [sluice_bin, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(self.dir / "data")]
            self.url = f"http://127.0.0.1:{port}"
        else:
            persistence = (
                ["--appendonly", "no"] if fsync == "none" else ["--appendonly", "yes", "--appendfsync", fsync]
            )
            self.cmd = [redis_bin, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                        *persistence, "--save", ""]
            self.url = f"redis://127.0.0.1:{port}/0"
        self.start()

    def start(self) -> None:
        if self.system == "sluice":
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            line = self.proc.stdout.readline().decode()  # type: ignore[union-attr]
            if not line.startswith("sluice listening on "):
                raise SystemExit(f"sluice did not start: {line!r}")
            return
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)


class System:
    """Enqueueing into, and running workers of, one system."""

    def __init__(self, name: str, broker: Broker) -> None:
        self.name = name
        self.broker = broker
        if name == "sluice":
            import sluice

            self.client = sluice.Client(broker.url)
            # Retries at once, as Celery's retry with no countdown does.
            self.client.put_queue(
                "bench", backoff_base=0.001, backoff_max=0.001, max_receive_count=5, visibility_timeout=10
            )
            return
        os.environ["BENCH_REDIS_URL"] = broker.url
        sys.path.insert(0, str(HERE))
        if name == "celery":
            import celery_app

            celery_app.app.conf.broker_url = broker.url
            celery_app.app.conf.result_backend = broker.url
            self.task = celery_app.celery_work
        elif name == "dramatiq":
            # Its broker reads BENCH_REDIS_URL at import, once: the port is the same all run.
            import dramatiq_app

            self.actor = dramatiq_app.dramatiq_work
        else:
            import redis
            import rq

            import rq_app

            self.queue = rq.Queue("bench", connection=redis.Redis.from_url(broker.url))
            self.rq_work = rq_app.rq_work
            self.retry = rq.Retry(max=rq_app.RETRIES)

    def enqueue(self, i: int, sleep_ms: int, fail_first: bool) -> None:
        if self.name == "sluice":
            self.client.enqueue("bench", "work", [i, sleep_ms, fail_first])
        elif self.name == "celery":
            self.task.apply_async(args=[i, sleep_ms, fail_first])
        elif self.name == "dramatiq":
            self.actor.send(i, sleep_ms, fail_first)
        else:
            self.queue.enqueue(self.rq_work, i, sleep_ms, fail_first, retry=self.retry)

    def start_worker(self, concurrency: int, done_file: Path) -> subprocess.Popen:
        env = {**os.environ, "BENCH_DONE_FILE": str(done_file), "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        if self.name == "sluice":
            env["BENCH_SLUICE_URL"] = self.broker.url
            cmd = [sys.executable, str(HERE / "sluice_worker.py"), str(concurrency)]
        elif self.name == "celery":
            env["BENCH_REDIS_URL"] = self.broker.url
            cmd = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool", "threads",
                   "--concurrency", str(concurrency), "--without-heartbeat", "--without-gossip",
                   "--without-mingle", "-Q", "bench", "--loglevel", "ERROR"]
        elif self.name == "dramatiq":
            env["BENCH_REDIS_URL"] = self.broker.url
            cmd = [sys.executable, "-m", "dramatiq", "dramatiq_app", "--processes", "1",
                   "--threads", str(concurrency), "--queues", "bench"]
        else:
            cmd = [sys.executable, "-m", "rq.cli", "worker-pool", "--num-workers", str(concurrency),
                   "--url", self.broker.url, "--logging-level", "ERROR", "bench"]
        return subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finished(done_file: Path) -> Dict[int, float]:
    """Each task's first finish time."""
    out: Dict[int, float] = {}
    if done_file.exists():
        for line in done_file.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                out.setdefault(int(parts[0]), float(parts[1]))
    return out


def wait_done(done_file: Path, want: set, timeout: float) -> Dict[int, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = finished(done_file)
        if want <= got.keys():
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(want & got.keys())} of {len(want)} tasks finished in {timeout:.0f}s")
        time.sleep(0.1)


def drain(system: System, n: int, concurrency: int, sleep_ms: int, fail_every: int, workdir: Path) -> dict:
    start = time.perf_counter()
    for i in range(n):
        system.enqueue(i, sleep_ms, fail_every > 0 and i % fail_every == 0)
    enqueue_rate = n / (time.perf_counter() - start)
    done_file = workdir / f"{system.name}-done"
    done_file.unlink(missing_ok=True)
    broker_cpu = cpu_seconds(system.broker.proc.pid)
    worker = system.start_worker(concurrency, done_file)
    try:
        got = wait_done(done_file, set(range(n)), timeout=600)
        worker_cpu = tree_cpu_seconds(worker.pid)
        broker_cpu = cpu_seconds(system.broker.proc.pid) - broker_cpu
    finally:
        stop_worker(worker)
    times = sorted(got.values())
    return {
        "enqueue_per_sec": round(enqueue_rate),
        "done_per_sec": round((n - 1) / (times[-1] - times[0])),
        "worker_cpu_us_per_task": round(worker_cpu / n * 1e6),
        "broker_cpu_us_per_task": round(broker_cpu / n * 1e6),
    }


def broker_killed(system: System, n: int, workdir: Path, settle: float) -> dict:
    """N trivial tasks enqueued; the broker is killed with SIGKILL when about a third have
    finished and started again on the same data; what never finishes is lost."""
    for i in range(n):
        system.enqueue(i, 2, False)
    done_file = workdir / f"{system.name}-killed"
    done_file.unlink(missing_ok=True)
    worker = system.start_worker(16, done_file)
    try:
        deadline = time.monotonic() + 300
        while len(finished(done_file)) < n // 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        system.broker.kill9()
        system.broker.start()
        # Wait until nothing more finishes for `settle` seconds (leases and Celery's
        # visibility timeout must run out for interrupted tasks to come back).
        last, last_change = -1, time.monotonic()
        while time.monotonic() - last_change < settle:
            now = len(finished(done_file))
            if now != last:
                last, last_change = now, time.monotonic()
            if now >= n:
                break
            time.sleep(0.2)
    finally:
        stop_worker(worker)
    runs = [int(line.split()[0]) for line in done_file.read_text().splitlines() if line.strip()]
    got = set(runs)
    return {"tasks": n, "lost": n - len(got & set(range(n))), "ran_twice": len(runs) - len(got)}


def latency(system: System, n: int, rate: float, workdir: Path) -> dict:
    done_file = workdir / f"{system.name}-latency"
    done_file.unlink(missing_ok=True)
    worker = system.start_worker(16, done_file)
    try:
        system.enqueue(-1, 0, False)  # warm-up: the worker is up once this is done
        wait_done(done_file, {-1}, timeout=60)
        sent: Dict[int, float] = {}
        start = time.perf_counter()
        for i in range(n):
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sent[i] = time.time()
            system.enqueue(i, 0, False)
        got = wait_done(done_file, set(range(n)), timeout=120)
    finally:
        stop_worker(worker)
    lat = sorted((got[i] - sent[i]) * 1000 for i in range(n))
    return {"p50_ms": round(lat[n // 2], 1), "p99_ms": round(lat[int(n * 0.99)], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", default="sluice,celery",
                   help=f"comma-separated, of {','.join(SYSTEMS)}")
    p.add_argument("--workloads", default="trivial,sleep,retry,latency,kill")
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--sluice-bin", default="target/release/sluice")
    p.add_argument("--redis-bin", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--settle", type=float, default=60.0,
                   help="kill: seconds without a task finishing before the rest count as lost")
    p.add_argument("--redis-fsync", choices=["always", "everysec", "none"], default="always",
                   help="Redis's appendfsync for Celery, Dramatiq and RQ (none: no persistence at all)")
    args = p.parse_args()
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; known: {','.join(SYSTEMS)}")
    workdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    # One port per system for the whole run: Celery's app and Dramatiq's broker keep theirs.
    ports = {name: free_port() for name in args.systems.split(",")}
    for workload in args.workloads.split(","):
        for name in args.systems.split(","):
            broker = Broker(name, args.sluice_bin, args.redis_bin, workdir, ports[name], args.redis_fsync)
            try:
                system = System(name, broker)
                if workload == "trivial":
                    r = drain(system, args.tasks, 16, 0, 0, workdir)
                elif workload == "sleep":
                    r = drain(system, args.tasks, 64, 10, 0, workdir)
                elif workload == "retry":
                    r = drain(system, args.tasks, 16, 0, 10, workdir)
                elif workload == "kill":
                    r = broker_killed(system, 3000, workdir, settle=args.settle)
                elif workload == "latency":
                    r = latency(system, 2000, 200.0, workdir)
                else:
                    raise SystemExit(f"unknown workload {workload!r}")
            finally:
                broker.stop()
            label = name if name == "sluice" else f"{name} (redis {args.redis_fsync})"
            print(json.dumps({"system": label, "workload": workload, **r}), flush=True)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
