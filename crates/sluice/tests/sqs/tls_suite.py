"""boto3 against an SQS endpoint serving HTTPS with the broker's certificate (--tls-cert):
the SDK verifies it against the private CA in SQS_CA, and queue URLs carry the configured
public URL (SQS_PUBLIC_URL). Run by crates/sluice/tests/sqs.rs."""

import os
import unittest

import boto3
import httpx

SQS_URL = os.environ["SQS_URL"]
SQS_CA = os.environ["SQS_CA"]
PUBLIC_URL = os.environ["SQS_PUBLIC_URL"]


def client(verify):
    return boto3.client(
        "sqs",
        endpoint_url=SQS_URL,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        verify=verify,
    )


class Tls(unittest.TestCase):
    def test_https_with_the_brokers_certificate(self):
        self.assertTrue(SQS_URL.startswith("https://"), SQS_URL)
        sqs = client(SQS_CA)
        url = sqs.create_queue(QueueName="tls-jobs")["QueueUrl"]
        self.assertEqual(url, f"{PUBLIC_URL}/000000000000/tls-jobs")
        sqs.send_message(QueueUrl=url, MessageBody="over tls")
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
        self.assertEqual(got[0]["Body"], "over tls")

    def test_an_untrusted_certificate_and_plain_http_fail(self):
        from botocore.exceptions import SSLError

        with self.assertRaises(SSLError):
            client(True).list_queues()
        with self.assertRaises(httpx.HTTPError):
            httpx.post(SQS_URL.replace("https://", "http://"), data={"Action": "ListQueues"}, timeout=5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
