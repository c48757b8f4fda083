"""boto3 and the AWS CLI against Sluice's SQS endpoint, as an application written for SQS
uses them: only the endpoint URL differs. Run by crates/sluice/tests/sqs.rs with SQS_URL (the SQS
listener) and SLUICE_URL (the broker's own API) set, once with a current boto3 (AWS JSON
protocol) and once with boto3 1.33 (query protocol: form parameters, XML answers), as
SQS_PROTOCOL says.

The MD5 digests are checked with an implementation written here from the SQS documentation
and checked against its published test vector, because boto3 itself does not verify them
(the Java, Go, .NET, Ruby and PHP SDKs do).
"""

import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import unittest

import boto3
import httpx
from botocore.exceptions import ClientError

SQS_URL = os.environ["SQS_URL"]
SLUICE_URL = os.environ["SLUICE_URL"]
PROTOCOL = os.environ.get("SQS_PROTOCOL", "json")
# The query-protocol model names the system attributes to receive `AttributeNames` only.
SYSTEM_NAMES = "MessageSystemAttributeNames" if PROTOCOL == "json" else "AttributeNames"


def client():
    return boto3.client(
        "sqs",
        endpoint_url=SQS_URL,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )


def attributes_md5(attributes):
    """MD5 of message attributes: per attribute in name order, length-prefixed name, data
    type, a transport byte (1 text, 2 binary) and length-prefixed value."""
    md5 = hashlib.md5()

    def field(b):
        md5.update(struct.pack(">I", len(b)))
        md5.update(b)

    for name in sorted(attributes):
        a = attributes[name]
        field(name.encode())
        field(a["DataType"].encode())
        if "BinaryValue" in a:
            md5.update(b"\x02")
            field(a["BinaryValue"])
        else:
            md5.update(b"\x01")
            field(a["StringValue"].encode())
    return md5.hexdigest()


def error_code(e):
    return e.response["Error"]["Code"]


class Sqs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sqs = client()
        assert cls.sqs.meta.service_model.protocol == PROTOCOL, (
            f"this boto3 ({boto3.__version__}) speaks {cls.sqs.meta.service_model.protocol}, "
            f"not {PROTOCOL}"
        )

    def queue(self, name, **attributes):
        return self.sqs.create_queue(
            QueueName=name, Attributes={k: str(v) for k, v in attributes.items()}
        )["QueueUrl"]

    def test_md5_implementation_matches_the_published_vector(self):
        self.assertEqual(
            attributes_md5({"attribName1": {"DataType": "String", "StringValue": "attribValue 1"}}),
            "19e27d4e946b072f3f58da80d94fd778",
        )

    def test_queues_create_idempotently_list_page_and_delete(self):
        url = self.queue("lq-a", VisibilityTimeout=40)
        self.assertTrue(url.endswith("/000000000000/lq-a"), url)
        self.assertEqual(self.queue("lq-a", VisibilityTimeout=40), url, "same attributes: same queue")
        with self.assertRaises(ClientError) as e:
            self.queue("lq-a", VisibilityTimeout=41)
        self.assertEqual(error_code(e.exception), "QueueAlreadyExists")
        for n in ("lq-b", "lq-c"):
            self.queue(n)
        self.assertEqual(self.sqs.get_queue_url(QueueName="lq-b")["QueueUrl"], url[:-1] + "b")
        seen, token = [], None
        while True:
            kw = {"QueueNamePrefix": "lq-", "MaxResults": 2}
            if token:
                kw["NextToken"] = token
            page = self.sqs.list_queues(**kw)
            seen += page["QueueUrls"]
            token = page.get("NextToken")
            if not token:
                break
        self.assertEqual([u.rsplit("/", 1)[1] for u in seen], ["lq-a", "lq-b", "lq-c"])
        # Without MaxResults: every match (up to 1000) and no NextToken, as SQS answers.
        whole = self.sqs.list_queues(QueueNamePrefix="lq-")
        self.assertEqual(len(whole["QueueUrls"]), 3)
        self.assertNotIn("NextToken", whole)
        self.assertEqual(self.sqs.list_queues(QueueNamePrefix="no such/prefix").get("QueueUrls", []), [])
        with self.assertRaises(ClientError) as e:
            self.sqs.list_queues(QueueNamePrefix="lq-", MaxResults=2, NextToken="garbage")
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")
        attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertEqual(attrs["VisibilityTimeout"], "40")
        self.assertEqual(attrs["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:lq-a")
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "3"})
        got = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])
        self.assertEqual(got["Attributes"], {"DelaySeconds": "3"})
        # The same queue in Sluice's own API.
        config = httpx.get(f"{SLUICE_URL}/v1/queues/lq-a").json()["config"]
        self.assertEqual((config["visibility_timeout_ms"], config["delay_ms"]), (40000, 3000))
        self.sqs.delete_queue(QueueUrl=url)
        with self.assertRaises(self.sqs.exceptions.QueueDoesNotExist) as e:
            self.sqs.get_queue_url(QueueName="lq-a")
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.NonExistentQueue")

    def test_send_receive_with_attributes_and_digests(self):
        url = self.queue("digests")
        attrs = {
            "a": {"DataType": "String", "StringValue": "x"},
            "n": {"DataType": "Number.int", "StringValue": "42"},
            "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        }
        sent = self.sqs.send_message(QueueUrl=url, MessageBody="hello ü", MessageAttributes=attrs)
        self.assertEqual(sent["MD5OfMessageBody"], hashlib.md5("hello ü".encode()).hexdigest())
        self.assertEqual(sent["MD5OfMessageAttributes"], attributes_md5(attrs))
        plain = self.sqs.send_message(QueueUrl=url, MessageBody="plain")
        self.assertNotIn("MD5OfMessageAttributes", plain, "no attributes, no digest")
        got = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            **{SYSTEM_NAMES: ["All"]},
        )["Messages"]
        self.assertEqual([m["Body"] for m in got], ["hello ü", "plain"])
        m = got[0]
        self.assertEqual(m["MessageId"], sent["MessageId"])
        self.assertEqual(m["MD5OfBody"], sent["MD5OfMessageBody"])
        self.assertEqual(m["MessageAttributes"], attrs)
        self.assertEqual(m["MD5OfMessageAttributes"], attributes_md5(attrs))
        self.assertEqual(m["Attributes"]["ApproximateReceiveCount"], "1")
        self.assertGreater(int(m["Attributes"]["SentTimestamp"]), 1_700_000_000_000)
        # Only the attributes asked for, with the digest of those.
        self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        again = self.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["a"])["Messages"][0]
        self.assertEqual(again["MessageAttributes"], {"a": attrs["a"]})
        self.assertEqual(again["MD5OfMessageAttributes"], attributes_md5({"a": attrs["a"]}))
        # Sluice's API sees the String attribute as itself.
        browse = httpx.get(f"{SLUICE_URL}/v1/queues/digests/messages", params={"state": "all"}).json()
        self.assertTrue(any(b["attributes"].get("a") == "x" for b in browse["messages"]), browse)

    def test_aws_trace_header_is_the_messages_trace_context(self):
        # X-Ray context sent as the AWSTraceHeader system attribute comes back as SQS returns
        # it, and is the W3C trace context Sluice's own API shows; context sent over Sluice's
        # API comes back over SQS as an AWSTraceHeader.
        url = self.queue("traced")
        xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
        system = {"AWSTraceHeader": {"DataType": "String", "StringValue": xray}}
        sent = self.sqs.send_message(QueueUrl=url, MessageBody="traced", MessageSystemAttributes=system)
        self.assertEqual(sent["MD5OfMessageSystemAttributes"], attributes_md5(system))
        batch = self.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": "b", "MessageBody": "batched", "MessageSystemAttributes": system}],
        )
        self.assertEqual(batch["Successful"][0]["MD5OfMessageSystemAttributes"], attributes_md5(system))
        plain = self.sqs.send_message(QueueUrl=url, MessageBody="plain")
        self.assertNotIn("MD5OfMessageSystemAttributes", plain)
        w3c = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        r = httpx.post(
            f"{SLUICE_URL}/v1/queues/traced/messages",
            content=b"from-sluice",
            headers={"traceparent": w3c, "content-type": "text/plain"},
        )
        self.assertEqual(r.status_code, 201, r.text)
        view = httpx.get(f"{SLUICE_URL}/v1/messages/{sent['MessageId']}").json()
        self.assertEqual(
            view["trace"], {"traceparent": "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"}
        )
        got = self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, **{SYSTEM_NAMES: ["AWSTraceHeader"]}
        )["Messages"]
        headers = {m["Body"]: m.get("Attributes", {}).get("AWSTraceHeader") for m in got}
        self.assertEqual(
            headers,
            {
                "traced": xray,
                "batched": xray,
                "plain": None,
                "from-sluice": "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=0",
            },
        )
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(
                QueueUrl=url,
                MessageBody="x",
                MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "nonsense"}},
            )
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")

    def test_batches_report_each_entry(self):
        url = self.queue("batches")
        out = self.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "ok1", "MessageBody": "one"},
                {"Id": "bad", "MessageBody": "x", "DelaySeconds": 901},
                {"Id": "ok2", "MessageBody": "two", "DelaySeconds": 0},
            ],
        )
        self.assertEqual(sorted(s["Id"] for s in out["Successful"]), ["ok1", "ok2"])
        self.assertEqual([(f["Id"], f["Code"], f["SenderFault"]) for f in out["Failed"]], [("bad", "InvalidParameterValue", True)])
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.TooManyEntriesInBatchRequest")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}] * 2)
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.BatchEntryIdsNotDistinct")
        got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        self.assertEqual(sorted(m["Body"] for m in got), ["one", "two"])
        done = self.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
            + [{"Id": "garbage", "ReceiptHandle": "not-a-receipt"}],
        )
        self.assertEqual(len(done["Successful"]), 2)
        self.assertEqual([(f["Id"], f["Code"]) for f in done["Failed"]], [("garbage", "ReceiptHandleIsInvalid")])
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url))

    def test_long_poll_wakes_on_send_and_delay_holds(self):
        url = self.queue("longpoll")
        got = {}

        def poll():
            started = time.monotonic()
            got["messages"] = self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])
            got["took"] = time.monotonic() - started

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)
        self.sqs.send_message(QueueUrl=url, MessageBody="wake")
        t.join()
        self.assertEqual([m["Body"] for m in got["messages"]], ["wake"])
        self.assertLess(got["took"], 5)
        self.sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url))
        late = self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        self.assertEqual([m["Body"] for m in late], ["later"])

    def test_stale_receipts_delete_nothing_and_cannot_change_visibility(self):
        url = self.queue("stale")
        self.sqs.send_message(QueueUrl=url, MessageBody="x")
        first = self.sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]
        second = self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"][0]
        self.assertNotEqual(first["ReceiptHandle"], second["ReceiptHandle"])
        # The first receipt is stale: deleting with it succeeds and deletes nothing, alone or
        # in a batch.
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
        out = self.sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": "old", "ReceiptHandle": first["ReceiptHandle"]}]
        )
        # An empty list is absent from a query-protocol answer.
        self.assertEqual(([s["Id"] for s in out["Successful"]], out.get("Failed", [])), (["old"], []))
        stats = httpx.get(f"{SLUICE_URL}/v1/queues/stale/stats").json()
        self.assertEqual(stats["in_flight"], 1, "the newer delivery still holds it")
        with self.assertRaises(ClientError) as e:
            self.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=10)
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.MessageNotInflight")
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
        stats = httpx.get(f"{SLUICE_URL}/v1/queues/stale/stats").json()
        self.assertEqual((stats["visible"], stats["in_flight"]), (0, 0), stats)

    def test_redrive_policy_dead_letters_after_max_receives(self):
        dlq = self.queue("work-dlq")
        arn = self.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url = self.queue("work", RedrivePolicy=json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"}))
        policy = json.loads(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"])
        self.assertEqual(policy, {"deadLetterTargetArn": arn, "maxReceiveCount": 2})
        self.assertEqual(self.sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"], [url])
        self.sqs.send_message(QueueUrl=url, MessageBody="poison")
        for _ in range(2):
            m = self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, VisibilityTimeout=0)["Messages"]
            self.assertEqual(m[0]["Body"], "poison")
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1))
        dead = self.sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=2)["Messages"]
        self.assertEqual([m["Body"] for m in dead], ["poison"])
        # Sluice's own API tells why.
        self.sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=dead[0]["ReceiptHandle"], VisibilityTimeout=0)
        browse = httpx.get(f"{SLUICE_URL}/v1/queues/work-dlq/messages").json()["messages"]
        self.assertEqual(browse[0]["dead_letter_reason"], "lease_expired")

    def test_move_tasks_redrive_the_dead_letters_at_a_rate(self):
        dlq = self.queue("move-dlq")
        dlq_arn = self.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        src = self.queue("move-src", RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1}))
        for i in range(3):
            self.sqs.send_message(QueueUrl=src, MessageBody=f"m{i}")
        got = self.sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
        self.assertEqual(len(got), 3)
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=src, WaitTimeSeconds=1))
        stats = httpx.get(f"{SLUICE_URL}/v1/queues/move-dlq/stats").json()
        self.assertEqual(stats["visible"], 3, stats)

        # Only out of a dead-letter queue; unknown handles are not found.
        with self.assertRaises(ClientError) as e:
            self.sqs.start_message_move_task(SourceArn=dlq_arn.replace("move-dlq", "move-src"))
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.UnsupportedOperation")
        with self.assertRaises(ClientError) as e:
            self.sqs.cancel_message_move_task(TaskHandle="00000000000000ff")
        self.assertEqual(error_code(e.exception), "ResourceNotFoundException")

        # A slow task holds its source: a second one is refused until it is cancelled.
        slow = self.sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
        with self.assertRaises(ClientError) as e:
            self.sqs.start_message_move_task(SourceArn=dlq_arn)
        self.assertEqual(error_code(e.exception), "AWS.SimpleQueueService.UnsupportedOperation")
        listed = self.sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
        self.assertEqual((listed[0]["TaskHandle"], listed[0]["Status"]), (slow, "RUNNING"))
        self.assertEqual(listed[0]["MaxNumberOfMessagesPerSecond"], 1)
        moved = self.sqs.cancel_message_move_task(TaskHandle=slow)["ApproximateNumberOfMessagesMoved"]
        self.assertLessEqual(moved, 3)

        # The rest goes back at full rate, to the queue each message came from.
        fast = self.sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
        deadline = time.monotonic() + 15
        while True:
            tasks = self.sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
            if tasks[0]["Status"] == "COMPLETED" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual([(t["TaskHandle"], t["Status"]) for t in tasks], [(fast, "COMPLETED"), (slow, "CANCELLED")])
        self.assertEqual(tasks[0]["ApproximateNumberOfMessagesMoved"] + moved, 3)
        back = self.sqs.receive_message(
            QueueUrl=src, MaxNumberOfMessages=10, WaitTimeSeconds=2, **{SYSTEM_NAMES: ["ApproximateReceiveCount"]}
        )["Messages"]
        self.assertEqual(sorted(m["Body"] for m in back), ["m0", "m1", "m2"])
        self.assertEqual({m["Attributes"]["ApproximateReceiveCount"] for m in back}, {"1"}, "moved messages start over")

        # Sluice's own API shows the same jobs, and the audit log who started them.
        jobs = httpx.get(f"{SLUICE_URL}/v1/redrives").json()["redrives"]
        self.assertTrue({slow, fast} <= {j["id"] for j in jobs}, jobs)
        audit = httpx.get(f"{SLUICE_URL}/v1/audit", params={"queue": "move-dlq"}).json()["entries"]
        self.assertIn(("sqs:anonymous", "redrive.create"), {(a["actor"], a["action"]) for a in audit}, audit)

    def test_fifo_queues_keep_group_order_and_deduplicate(self):
        url = self.queue("orders.fifo", FifoQueue="true")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
        self.assertEqual(error_code(e.exception), "MissingParameter")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
        self.assertEqual(error_code(e.exception), "InvalidParameterValue", "no dedup id, no content dedup")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=5)
        self.assertEqual(error_code(e.exception), "InvalidParameterValue", "no per-message delay on FIFO")
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
        attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        self.assertEqual((attrs["FifoQueue"], attrs["ContentBasedDeduplication"]), ("true", "true"))

        a = self.sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g1")
        again = self.sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g1")
        self.assertEqual(again["MessageId"], a["MessageId"], "the same body within 5 minutes is one message")
        out = self.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": "b", "MessageBody": "b", "MessageGroupId": "g1"},
                {"Id": "c", "MessageBody": "c", "MessageGroupId": "g2", "MessageDeduplicationId": "c-1"},
            ],
        )
        seq = {s["Id"]: int(s["SequenceNumber"]) for s in out["Successful"]}
        self.assertLess(int(a["SequenceNumber"]), seq["b"])
        # One message of a group at a time, in send order.
        first = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, **{SYSTEM_NAMES: ["All"]})["Messages"]
        self.assertEqual(sorted(m["Body"] for m in first), ["a", "c"])
        self.assertEqual({m["Attributes"]["MessageGroupId"] for m in first}, {"g1", "g2"})
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
        for m in first:
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        then = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        self.assertEqual([m["Body"] for m in then], ["b"])

        standard = self.queue("not-fifo")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d")
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")
        with self.assertRaises(ClientError) as e:
            self.sqs.set_queue_attributes(QueueUrl=standard, Attributes={"ContentBasedDeduplication": "true"})
        self.assertEqual(error_code(e.exception), "InvalidAttributeName")

    def test_message_group_id_on_a_standard_queue_is_the_fair_key(self):
        # SQS fair queues: on a standard queue MessageGroupId names the tenant. One tenant's
        # backlog must not hold another's message back, and a group's messages may go at once.
        url = self.queue("fair")
        self.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": f"n{i}", "MessageBody": f"noisy-{i}", "MessageGroupId": "noisy"} for i in range(10)],
        )
        for _ in range(3):
            self.sqs.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": f"n{i}", "MessageBody": "noisy", "MessageGroupId": "noisy"} for i in range(10)],
            )
        self.sqs.send_message(QueueUrl=url, MessageBody="quiet-1", MessageGroupId="quiet")
        got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3, **{SYSTEM_NAMES: ["All"]})["Messages"]
        self.assertEqual(len(got), 3, "a group's messages go in parallel on a standard queue")
        bodies = [m["Body"] for m in got]
        self.assertIn("quiet-1", bodies, "the quiet tenant is not behind 40 of the noisy one")
        groups = {m["Body"]: m["Attributes"]["MessageGroupId"] for m in got}
        self.assertEqual(groups["quiet-1"], "quiet")
        view = httpx.get(f"{SLUICE_URL}/v1/queues/fair/messages?state=visible&limit=1").json()["messages"][0]
        self.assertEqual(view.get("key"), "noisy")
        self.assertNotIn("group", view, "a key, not a FIFO group")

    def test_tags_are_the_queues_tags(self):
        url = self.sqs.create_queue(QueueName="tagged", tags={"team": "core", "env": "test"})["QueueUrl"]
        self.assertEqual(self.sqs.list_queue_tags(QueueUrl=url)["Tags"], {"team": "core", "env": "test"})
        self.sqs.tag_queue(QueueUrl=url, Tags={"team": "payments", "tier": "1"})
        self.sqs.untag_queue(QueueUrl=url, TagKeys=["env", "absent"])
        self.assertEqual(self.sqs.list_queue_tags(QueueUrl=url)["Tags"], {"team": "payments", "tier": "1"})
        config = httpx.get(f"{SLUICE_URL}/v1/queues/tagged").json()["config"]
        self.assertEqual(config["tags"], {"team": "payments", "tier": "1"})
        self.sqs.untag_queue(QueueUrl=url, TagKeys=["team", "tier"])
        self.assertNotIn("Tags", self.sqs.list_queue_tags(QueueUrl=url))
        with self.assertRaises(ClientError) as e:
            self.sqs.tag_queue(QueueUrl=url, Tags={"k": "v" * 257})
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")

    def test_the_queues_receive_wait_long_polls(self):
        url = self.queue("waits", ReceiveMessageWaitTimeSeconds=5)
        attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ReceiveMessageWaitTimeSeconds"])
        self.assertEqual(attrs["Attributes"]["ReceiveMessageWaitTimeSeconds"], "5")
        got = {}

        def poll():
            got["messages"] = self.sqs.receive_message(QueueUrl=url).get("Messages", [])

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)
        self.sqs.send_message(QueueUrl=url, MessageBody="waited for")
        t.join()
        self.assertEqual([m["Body"] for m in got["messages"]], ["waited for"], "a receive without WaitTimeSeconds waits as the queue says")
        # Sluice's API waits the same way when a receive names no wait.
        self.assertEqual(httpx.get(f"{SLUICE_URL}/v1/queues/waits").json()["config"]["receive_wait_ms"], 5000)

    def test_the_aws_cli_works_unchanged(self):
        aws_bin = os.path.join(os.path.dirname(sys.executable), "aws")
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID="x",
            AWS_SECRET_ACCESS_KEY="x",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )

        def run(*args):
            return subprocess.run(
                [aws_bin, "--endpoint-url", SQS_URL, "--output", "json", "sqs", *args],
                env=env, capture_output=True, text=True, timeout=60,
            )

        def aws(*args):
            out = run(*args)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout) if out.stdout.strip() else None

        url = aws("create-queue", "--queue-name", "cli-q")["QueueUrl"]
        sent = aws(
            "send-message", "--queue-url", url, "--message-body", "from the cli",
            "--message-attributes", '{"k": {"DataType": "String", "StringValue": "v"}}',
        )
        self.assertEqual(sent["MD5OfMessageBody"], hashlib.md5(b"from the cli").hexdigest())
        got = aws(
            "receive-message", "--queue-url", url, "--message-attribute-names", "All",
            "--wait-time-seconds", "2",
        )["Messages"][0]
        self.assertEqual((got["Body"], got["MessageAttributes"]["k"]["StringValue"]), ("from the cli", "v"))
        aws("delete-message", "--queue-url", url, "--receipt-handle", got["ReceiptHandle"])
        attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
        self.assertEqual(attrs["ApproximateNumberOfMessages"], "0")
        missing = run("get-queue-url", "--queue-name", "no-such-queue")
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("AWS.SimpleQueueService.NonExistentQueue", missing.stderr)
        aws("delete-queue", "--queue-url", url)

    def test_purge_and_bad_parameters(self):
        url = self.queue("purged")
        self.sqs.send_message(QueueUrl=url, MessageBody="x")
        self.sqs.purge_queue(QueueUrl=url)
        self.assertNotIn("Messages", self.sqs.receive_message(QueueUrl=url))
        with self.assertRaises(ClientError) as e:
            self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")
        with self.assertRaises(ClientError) as e:
            self.sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={"AWS.x": {"DataType": "String", "StringValue": "v"}})
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")
        with self.assertRaises(ClientError) as e:
            self.sqs.create_queue(QueueName="bad name")
        self.assertEqual(error_code(e.exception), "InvalidParameterValue")
        with self.assertRaises(ClientError) as e:
            self.sqs.set_queue_attributes(QueueUrl=url, Attributes={"NoSuchAttribute": "1"})
        self.assertEqual(error_code(e.exception), "InvalidAttributeName")


if __name__ == "__main__":
    unittest.main(verbosity=2)
