"""boto3 against an SQS endpoint with [[sqs_keys]]: requests are SigV4-verified and each key
acts with its role and queue patterns. Run by crates/sluice/tests/sqs.rs with SQS_URL and
SLUICE_URL (the broker's own API, for the audit log) set; the
broker's keys are those of KEYS below."""

import json
import os
import unittest

import boto3
import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

SQS_URL = os.environ["SQS_URL"]
SLUICE_URL = os.environ["SLUICE_URL"]

KEYS = {
    "admin": ("AKIAADMIN0000000", "admin-secret-0123456789"),
    "producer": ("AKIAPRODUCER0000", "producer-secret-0123456789"),
    "operator": ("AKIAOPERATOR0000", "operator-secret-0123456789"),
}


def client(access, secret):
    return boto3.client(
        "sqs",
        endpoint_url=SQS_URL,
        region_name="eu-west-1",
        aws_access_key_id=access,
        aws_secret_access_key=secret,
    )


def code(e):
    return e.response["Error"]["Code"]


class Signed(unittest.TestCase):
    def test_a_valid_signature_is_accepted(self):
        sqs = client(*KEYS["admin"])
        url = sqs.create_queue(QueueName="signed-jobs")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="hello")
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
        self.assertEqual(got[0]["Body"], "hello")
        # The audit log names the key that created the queue.
        audit = httpx.get(f"{SLUICE_URL}/v1/audit", params={"queue": "signed-jobs"}).json()["entries"]
        self.assertIn(("sqs:AKIAADMIN0000000", "queue.create"), {(a["actor"], a["action"]) for a in audit})

    def test_a_wrong_secret_is_refused(self):
        sqs = client(KEYS["admin"][0], "not-the-secret")
        with self.assertRaises(ClientError) as e:
            sqs.list_queues()
        self.assertEqual(code(e.exception), "SignatureDoesNotMatch")

    def test_an_unknown_key_is_refused(self):
        with self.assertRaises(ClientError) as e:
            client("AKIANOBODY", "whatever").list_queues()
        self.assertEqual(code(e.exception), "InvalidClientTokenId")

    def test_roles_and_queue_patterns_apply(self):
        admin = client(*KEYS["admin"])
        url = admin.create_queue(QueueName="orders-1")["QueueUrl"]
        other = admin.create_queue(QueueName="billing")["QueueUrl"]
        producer = client(*KEYS["producer"])
        producer.send_message(QueueUrl=url, MessageBody="ok")
        with self.assertRaises(ClientError) as e:
            producer.receive_message(QueueUrl=url)
        self.assertEqual(code(e.exception), "AccessDenied")
        with self.assertRaises(ClientError) as e:
            producer.send_message(QueueUrl=other, MessageBody="not mine")
        self.assertEqual(code(e.exception), "AccessDenied")
        listed = [u.rsplit("/", 1)[1] for u in producer.list_queues()["QueueUrls"]]
        self.assertEqual(listed, ["orders-1"], "a key lists only the queues it may see")

    def test_a_redrive_policy_needs_the_right_to_manage_its_target(self):
        admin = client(*KEYS["admin"])
        admin.create_queue(QueueName="audit-dlq")
        operator = client(*KEYS["operator"])
        url = operator.create_queue(QueueName="team-jobs")["QueueUrl"]
        mine = operator.create_queue(QueueName="team-dlq")["QueueUrl"]

        def policy(dlq):
            arn = operator.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            arn = arn["Attributes"]["QueueArn"].rsplit(":", 1)[0] + ":" + dlq
            return {"RedrivePolicy": f'{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"3"}}'}

        with self.assertRaises(ClientError) as e:
            operator.set_queue_attributes(QueueUrl=url, Attributes=policy("audit-dlq"))
        self.assertEqual(code(e.exception), "AccessDenied")
        with self.assertRaises(ClientError) as e:
            operator.create_queue(QueueName="team-other", Attributes=policy("audit-dlq"))
        self.assertEqual(code(e.exception), "AccessDenied")
        operator.set_queue_attributes(QueueUrl=url, Attributes=policy("team-dlq"))
        got = operator.list_dead_letter_source_queues(QueueUrl=mine)["queueUrls"]
        self.assertEqual([u.rsplit("/", 1)[1] for u in got], ["team-jobs"])

    def test_a_scoped_move_task_writes_only_inside_its_patterns(self):
        admin = client(*KEYS["admin"])
        operator = client(*KEYS["operator"])

        def arn(url):
            got = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            return got["Attributes"]["QueueArn"]

        def dead_letter_queue(name, source):
            dlq = admin.create_queue(QueueName=name)["QueueUrl"]
            policy = f'{{"deadLetterTargetArn":"{arn(dlq)}","maxReceiveCount":"3"}}'
            admin.create_queue(QueueName=source, Attributes={"RedrivePolicy": policy})
            return dlq

        # An admin pointed a queue outside the operator's patterns at a DLQ inside them.
        dlq = dead_letter_queue("team-shared-dlq", "billing-source")
        jobs = operator.create_queue(QueueName="team-work")["QueueUrl"]
        # Without DestinationArn each message goes back to its own source queue, which may be
        # outside the key's patterns.
        with self.assertRaises(ClientError) as e:
            operator.start_message_move_task(SourceArn=arn(dlq))
        self.assertEqual(code(e.exception), "AccessDenied")
        self.assertIn("DestinationArn", e.exception.response["Error"]["Message"])
        handle = operator.start_message_move_task(SourceArn=arn(dlq), DestinationArn=arn(jobs))
        self.assertTrue(handle["TaskHandle"])
        # A task of a queue outside the patterns reads as one that does not exist.
        other = dead_letter_queue("audit-moves-dlq", "audit-moves")
        theirs = admin.start_message_move_task(SourceArn=arn(other))["TaskHandle"]
        with self.assertRaises(ClientError) as e:
            operator.cancel_message_move_task(TaskHandle=theirs)
        self.assertEqual(code(e.exception), "ResourceNotFoundException")
        self.assertNotIn("audit", e.exception.response["Error"]["Message"])

    def test_a_signature_must_cover_the_target(self):
        # botocore's own signer, as boto3 uses it; X-Amz-Target (which picks the action of a
        # JSON request) is added before signing, or after it, where a relay could change it.
        access, secret = KEYS["admin"]
        url = client(access, secret).create_queue(QueueName="target-kept")["QueueUrl"]

        def send(target, signed_target):
            request = AWSRequest(
                method="POST",
                url=SQS_URL + "/",
                data=json.dumps({"QueueUrl": url}),
                headers={"Content-Type": "application/x-amz-json-1.0"},
            )
            if signed_target:
                request.headers["X-Amz-Target"] = target
            SigV4Auth(Credentials(access, secret), "sqs", "eu-west-1").add_auth(request)
            request.headers["X-Amz-Target"] = target
            return httpx.post(request.url, content=request.body, headers=dict(request.headers.items()))

        for target in ("AmazonSQS.GetQueueAttributes", "AmazonSQS.DeleteQueue"):
            refused = send(target, signed_target=False)
            self.assertEqual(refused.status_code, 400, refused.text)
            self.assertEqual(refused.json()["__type"], "com.amazonaws.sqs#IncompleteSignature")
            self.assertIn("x-amz-target", refused.json()["message"])
        answered = send("AmazonSQS.GetQueueAttributes", signed_target=True)
        self.assertEqual(answered.status_code, 200, answered.text)
        self.assertIn(url, client(access, secret).list_queues()["QueueUrls"], "the queue is still there")


if __name__ == "__main__":
    unittest.main(verbosity=2)
