"""boto3 against an SQS endpoint: send, then receive + delete, at batch 1 and 10.

Loads any SQS-compatible endpoint the same way (Sluice's `sluice serve --sqs-listen`, moto's
server, ElasticMQ, …) so they can be compared in one run on one machine:

    python python/benchmarks/sqs_clients.py --endpoint http://127.0.0.1:9324 --label sluice

Each of --threads threads has its own boto3 client (its own keep-alive connection) and a
share of --messages messages of --body-bytes bytes. Phase one sends them all (SendMessage, or
SendMessageBatch of --batch); phase two receives them (ReceiveMessage with
MaxNumberOfMessages=--batch, long polling 1 s) and deletes each (DeleteMessage, or
DeleteMessageBatch). A phase ends when its last message is sent or deleted. It prints
messages per second of each phase; a fresh queue per run.
"""

import argparse
import json
import threading
import time
import uuid

import boto3
from botocore.config import Config


def client(endpoint):
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 0}, max_pool_connections=4),
    )


def run(endpoint, batch, threads, messages, body_bytes):
    admin = client(endpoint)
    name = f"bench-{uuid.uuid4().hex[:12]}"
    url = admin.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    body = "x" * body_bytes
    per_thread = messages // threads
    errors = []

    def sender():
        c = client(endpoint)
        try:
            left = per_thread
            while left > 0:
                n = min(batch, left)
                if batch == 1:
                    c.send_message(QueueUrl=url, MessageBody=body)
                else:
                    out = c.send_message_batch(
                        QueueUrl=url,
                        Entries=[{"Id": str(i), "MessageBody": body} for i in range(n)],
                    )
                    if out.get("Failed"):
                        raise RuntimeError(out["Failed"])
                left -= n
        except Exception as e:  # reported after the phase
            errors.append(e)

    received = [0]
    finished = []
    lock = threading.Lock()
    total = per_thread * threads

    def consumer():
        c = client(endpoint)
        try:
            while True:
                with lock:
                    if received[0] >= total:
                        return
                got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=batch, WaitTimeSeconds=1).get("Messages", [])
                if not got:
                    continue
                if batch == 1:
                    c.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
                else:
                    out = c.delete_message_batch(
                        QueueUrl=url,
                        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
                    )
                    if out.get("Failed"):
                        raise RuntimeError(out["Failed"])
                with lock:
                    received[0] += len(got)
                    if received[0] >= total and not finished:
                        finished.append(time.perf_counter())
        except Exception as e:
            errors.append(e)

    def phase(target):
        ts = [threading.Thread(target=target) for _ in range(threads)]
        start = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        end = finished[0] if finished else time.perf_counter()
        return end - start

    sent_secs = phase(sender)
    recv_secs = phase(consumer)
    admin.delete_queue(QueueUrl=url)
    if errors:
        raise SystemExit(f"errors: {errors[:3]}")
    return {
        "client": "boto3",
        "batch": batch,
        "threads": threads,
        "messages": total,
        "send_per_sec": round(total / sent_secs),
        "receive_delete_per_sec": round(received[0] / recv_secs),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--label", default="endpoint")
    p.add_argument("--batches", default="1,10")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--messages", type=int, default=4000)
    p.add_argument("--body-bytes", type=int, default=256)
    args = p.parse_args()
    for b in (int(x) for x in args.batches.split(",")):
        r = run(args.endpoint, b, args.threads, args.messages, args.body_bytes)
        print(json.dumps({"label": args.label, **r}), flush=True)


if __name__ == "__main__":
    main()
