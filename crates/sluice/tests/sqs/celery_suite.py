"""Celery on Kombu's SQS transport against Sluice's SQS endpoint: tasks sent with .delay()
are run by a real Celery worker process (Kombu's asynchronous SQS client over pycurl), and the
queue they pass through is a Sluice queue. Run by crates/sluice/tests/sqs.rs with SQS_URL (the
SQS listener) and SLUICE_URL (the broker's own API) set."""

import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

import httpx

SQS_URL = os.environ["SQS_URL"]
SLUICE_URL = os.environ["SLUICE_URL"]

TASKS = '''
import os

from celery import Celery

app = Celery("sluice_sqs_check", broker=os.environ["BROKER_URL"])
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,
    "wait_time_seconds": 2,
    "polling_interval": 0.2,
    "visibility_timeout": 30,
}
app.conf.task_default_queue = "celery-tasks"
app.conf.task_acks_late = True
app.conf.worker_enable_remote_control = False
app.conf.broker_connection_retry_on_startup = True


@app.task
def add(a, b, out):
    with open(out, "a") as f:
        f.write(f"{a + b}\\n")
    return a + b
'''


class Celery(unittest.TestCase):
    def test_a_celery_worker_runs_tasks_sent_through_sluice(self):
        endpoint = urllib.parse.urlparse(SQS_URL)
        env = dict(
            os.environ,
            BROKER_URL=f"sqs://x:x@{endpoint.hostname}:{endpoint.port}",
            AWS_ACCESS_KEY_ID="x",
            AWS_SECRET_ACCESS_KEY="x",
            AWS_DEFAULT_REGION="us-east-1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "tasks.py"), "w") as f:
                f.write(TASKS)
            out = os.path.join(d, "results.txt")
            send = subprocess.run(
                [sys.executable, "-c", f"from tasks import add\nfor i in range(3): add.delay(i, 10, {out!r})"],
                cwd=d, env=env, capture_output=True, text=True, timeout=60,
            )
            self.assertEqual(send.returncode, 0, send.stderr)
            stats = httpx.get(f"{SLUICE_URL}/v1/queues/celery-tasks/stats").json()
            self.assertEqual(stats["visible"], 3, "the tasks wait in a Sluice queue")

            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool=solo",
                 "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "INFO"],
                cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            try:
                deadline = time.monotonic() + 60
                done = []
                while time.monotonic() < deadline and worker.poll() is None:
                    if os.path.exists(out):
                        with open(out) as f:
                            done = sorted(int(line) for line in f.read().split())
                        if len(done) >= 3:
                            break
                    time.sleep(0.2)
                acked = 0
                while time.monotonic() < deadline:
                    stats = httpx.get(f"{SLUICE_URL}/v1/queues/celery-tasks/stats").json()
                    acked = stats["totals"]["acked"]
                    if acked >= 3:
                        break
                    time.sleep(0.2)
            finally:
                worker.terminate()
                try:
                    log, _ = worker.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    log, _ = worker.communicate()
            self.assertEqual(done, [10, 11, 12], log)
            self.assertEqual(acked, 3, f"each task deleted once it ran (acks_late): {stats}\n{log}")
            self.assertEqual((stats["visible"], stats["in_flight"]), (0, 0), stats)


if __name__ == "__main__":
    unittest.main(verbosity=2)
