//! The SQS endpoint's actions: the table, and the test that tries each with every key,
//! signed with SigV4 as SDKs sign.

use std::collections::BTreeSet;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sluice_server::auth::Action::{self, *};

use crate::Reach::{self, *};
use crate::{Broker, Expect, Fixture, Key, cases, refused_by_role};

/// The answer for a move task that does not exist.
pub const NO_TASK: &str = "ResourceNotFoundException";

/// Builds an action's input from the case's fixture, the one inside the patterns, and the
/// SQS listener's base URL.
type InputFn = fn(&Fixture, &Fixture, &str) -> Value;

/// One action of the endpoint (or one form of it).
pub struct SqsAction {
    /// Its name, as in `X-Amz-Target: AmazonSQS.<name>`.
    pub name: &'static str,
    /// Where the request names the queue in question, for an operation listed in more than
    /// one form.
    pub form: &'static str,
    /// The actions it needs.
    pub needs: &'static [Action],
    /// What it reaches; an unknown move task answers [`NO_TASK`].
    pub reach: Reach<&'static str>,
    input: InputFn,
}

fn a(
    name: &'static str,
    needs: &'static [Action],
    reach: Reach<&'static str>,
    input: InputFn,
) -> SqsAction {
    SqsAction {
        name,
        form: "",
        needs,
        reach,
        input,
    }
}

impl SqsAction {
    fn form(mut self, form: &'static str) -> Self {
        self.form = form;
        self
    }
}

/// Every action SQS has. The endpoint must either serve one and have it in [`actions`], or
/// answer `InvalidAction`.
pub const SQS_ACTIONS: [&str; 23] = [
    "AddPermission",
    "CancelMessageMoveTask",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "CreateQueue",
    "DeleteMessage",
    "DeleteMessageBatch",
    "DeleteQueue",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks",
    "ListQueueTags",
    "ListQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "RemovePermission",
    "SendMessage",
    "SendMessageBatch",
    "SetQueueAttributes",
    "StartMessageMoveTask",
    "TagQueue",
    "UntagQueue",
];

fn url(base: &str, queue: &str) -> String {
    format!("{base}/000000000000/{queue}")
}

fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{queue}")
}

fn redrive_policy(dlq: &str) -> Value {
    json!({
        "RedrivePolicy": json!({ "deadLetterTargetArn": arn(dlq), "maxReceiveCount": "3" }).to_string()
    })
}

/// Every action the endpoint serves: what it needs and what it reaches.
pub fn actions() -> Vec<SqsAction> {
    vec![
        a("ListQueues", &[ReadQueue], Global, |_, _, _| json!({})),
        a("CreateQueue", &[ManageQueue], Queue, |f, _, _| {
            json!({ "QueueName": format!("{}-new", f.queue) })
        }),
        a("CreateQueue", &[ManageQueue], Queue, |f, home, _| {
            json!({ "QueueName": format!("{}-new", home.queue), "Attributes": redrive_policy(&f.dlq) })
        })
        .form("naming it in `RedrivePolicy`"),
        a("GetQueueUrl", &[ReadQueue], Queue, |f, _, _| {
            json!({ "QueueName": f.queue })
        }),
        a("GetQueueAttributes", &[ReadQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "AttributeNames": ["All"] })
        }),
        a("SetQueueAttributes", &[ManageQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "Attributes": { "VisibilityTimeout": "30" } })
        }),
        a("SetQueueAttributes", &[ManageQueue], Queue, |f, home, base| {
            json!({ "QueueUrl": url(base, &home.queue), "Attributes": redrive_policy(&f.dlq) })
        })
        .form("naming it in `RedrivePolicy`"),
        a("ListDeadLetterSourceQueues", &[ReadQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.dlq) })
        }),
        a("TagQueue", &[ManageQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "Tags": { "team": "x" } })
        }),
        a("UntagQueue", &[ManageQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "TagKeys": ["team"] })
        }),
        a("ListQueueTags", &[ReadQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue) })
        }),
        a("PurgeQueue", &[ManageQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue) })
        }),
        a("DeleteQueue", &[ManageQueue], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue) })
        }),
        a("SendMessage", &[Send], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "MessageBody": "hello" })
        }),
        a("SendMessageBatch", &[Send], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "Entries": [{ "Id": "a", "MessageBody": "hello" }] })
        }),
        a("ReceiveMessage", &[Consume], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "WaitTimeSeconds": 0 })
        }),
        a("DeleteMessage", &[Consume], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "ReceiptHandle": f.receipt })
        }),
        a("DeleteMessageBatch", &[Consume], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "Entries": [{ "Id": "a", "ReceiptHandle": f.receipt }] })
        }),
        a("ChangeMessageVisibility", &[Consume], Queue, |f, _, base| {
            json!({ "QueueUrl": url(base, &f.queue), "ReceiptHandle": f.receipt, "VisibilityTimeout": 30 })
        }),
        a("ChangeMessageVisibilityBatch", &[Consume], Queue, |f, _, base| {
            json!({
                "QueueUrl": url(base, &f.queue),
                "Entries": [{ "Id": "a", "ReceiptHandle": f.receipt, "VisibilityTimeout": 30 }]
            })
        }),
        a("StartMessageMoveTask", &[Redrive], Queue, |f, _, _| {
            json!({ "SourceArn": arn(&f.dlq), "DestinationArn": arn(&f.queue) })
        }),
        a("StartMessageMoveTask", &[Redrive], Queue, |f, home, _| {
            json!({ "SourceArn": arn(&f.dlq), "DestinationArn": arn(&home.queue) })
        })
        .form("naming it as `SourceArn`"),
        a("StartMessageMoveTask", &[Redrive], Queue, |f, home, _| {
            json!({ "SourceArn": arn(&home.dlq), "DestinationArn": arn(&f.queue) })
        })
        .form("naming it as `DestinationArn`"),
        a("StartMessageMoveTask", &[Redrive], EveryQueue, |f, _, _| {
            json!({ "SourceArn": arn(&f.dlq) })
        })
        .form("without `DestinationArn`"),
        a("ListMessageMoveTasks", &[Redrive], Queue, |f, _, _| {
            json!({ "SourceArn": arn(&f.dlq) })
        }),
        a("CancelMessageMoveTask", &[Redrive], Id(NO_TASK), |f, _, _| {
            json!({ "TaskHandle": f.job })
        }),
    ]
}

/// How a request is signed.
enum Signer<'a> {
    /// Not at all.
    Unsigned,
    /// With this access key id and secret.
    As(&'a str, &'a str),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    m.update(data.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// `POST /` of the AWS JSON protocol, signed with SigV4 over every header sent.
async fn call(b: &Broker, signer: Signer<'_>, action: &str, input: &Value) -> (u16, Value) {
    let body = input.to_string();
    let host = b.sqs.to_string();
    let target = format!("AmazonSQS.{action}");
    let payload = hex(&Sha256::digest(body.as_bytes()));
    let format =
        time::format_description::parse_borrowed::<2>("[year][month][day]T[hour][minute][second]Z")
            .expect("format");
    let amz_date = time::OffsetDateTime::now_utc()
        .format(&format)
        .expect("a date");
    let date = &amz_date[..8];
    let mut req = b
        .client
        .post(format!("http://{host}/"))
        .header("content-type", sluice_sqs::JSON_CONTENT_TYPE)
        .header("x-amz-target", &target)
        .header("x-amz-date", &amz_date)
        .header("x-amz-content-sha256", &payload);
    if let Signer::As(id, secret) = signer {
        let signed = "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-target";
        let canonical = format!(
            "POST\n/\n\ncontent-type:{}\nhost:{host}\nx-amz-content-sha256:{payload}\n\
             x-amz-date:{amz_date}\nx-amz-target:{target}\n\n{signed}\n{payload}",
            sluice_sqs::JSON_CONTENT_TYPE
        );
        let scope = format!("{date}/us-east-1/sqs/aws4_request");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let k = hmac(format!("AWS4{secret}").as_bytes(), date);
        let k = hmac(&k, "us-east-1");
        let k = hmac(&k, "sqs");
        let k = hmac(&k, "aws4_request");
        let signature = hex(&hmac(&k, &to_sign));
        req = req.header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={id}/{scope}, SignedHeaders={signed}, \
                 Signature={signature}"
            ),
        );
    }
    let resp = req.body(body).send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("answer");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The error shape of an answer (`AccessDeniedException`, …), if it is an error.
fn shape(v: &Value) -> Option<&str> {
    v["__type"]
        .as_str()
        .map(|t| t.rsplit('#').next().unwrap_or(t))
}

async fn as_key(b: &Broker, key: &Key, action: &str, input: &Value) -> (u16, Value) {
    let (id, secret) = (key.access_key_id(), key.sqs_secret());
    call(b, Signer::As(&id, &secret), action, input).await
}

/// Every SQS action × every key × a queue inside and outside its patterns, unsigned and
/// signed by unknown keys.
pub async fn run(b: &Broker) {
    let base = format!("http://{}", b.sqs);
    let table = actions();
    let listed: BTreeSet<&str> = table.iter().map(|a| a.name).collect();
    for name in SQS_ACTIONS {
        if listed.contains(name) {
            continue;
        }
        let (status, v) = as_key(b, &crate::root(), name, &json!({})).await;
        assert_eq!(
            (status, shape(&v)),
            (400, Some("InvalidAction")),
            "the endpoint serves {name}: add it to actions() in tests/permissions/sqs.rs ({v})"
        );
    }
    for name in &listed {
        assert!(SQS_ACTIONS.contains(name), "{name} is not an SQS action");
    }

    for action in &table {
        let fx = b.fixtures().await;
        let input = |f: &Fixture| (action.input)(f, &fx.inside, &base);
        let what = if action.form.is_empty() {
            action.name.to_owned()
        } else {
            format!("{} ({})", action.name, action.form)
        };
        let (status, v) = call(b, Signer::Unsigned, action.name, &input(&fx.inside)).await;
        assert_eq!(
            (status, shape(&v)),
            (403, Some("MissingAuthenticationToken")),
            "{what} unsigned: {v}"
        );
        let (status, v) = call(
            b,
            Signer::As("AKIANOBODY", "secret"),
            action.name,
            &input(&fx.inside),
        )
        .await;
        assert_eq!(
            (status, shape(&v)),
            (403, Some("InvalidClientTokenId")),
            "{what} by an unknown key: {v}"
        );
        // A role that may not cancel tasks is refused alike whether the handle exists or not.
        if let Id(_) = action.reach {
            let gone = input(&fx.inside.missing());
            for key in refused_by_role(action.needs) {
                let (status, v) = as_key(b, &key, action.name, &gone).await;
                assert_eq!(
                    (status, shape(&v)),
                    (403, Some("AccessDeniedException")),
                    "{what} as {} for a task that does not exist must be refused as for one that \
                     does: {v}",
                    key.name()
                );
            }
        }
        // The first allowed request on each side meets its fixture as it was set up.
        let mut fresh = [true, true];
        for (key, side, expect) in cases(action.needs, action.reach) {
            let (status, v) = as_key(b, &key, action.name, &input(fx.on(side))).await;
            let case = format!("{what} as {} on {side:?}", key.name());
            match expect {
                Expect::Refused => assert_eq!(
                    (status, shape(&v)),
                    (403, Some("AccessDeniedException")),
                    "{case} must be refused: {v}"
                ),
                Expect::Unknown(unknown) => assert_eq!(
                    shape(&v),
                    Some(unknown),
                    "{case} must answer as for a task that does not exist: {status} {v}"
                ),
                Expect::Allowed => {
                    assert!(
                        !matches!(
                            shape(&v),
                            Some(
                                "AccessDeniedException"
                                    | "MissingAuthenticationToken"
                                    | "InvalidClientTokenId"
                                    | "SignatureDoesNotMatch"
                                    | "IncompleteSignature"
                            )
                        ),
                        "{case} must be allowed: {status} {v}"
                    );
                    let i = usize::from(side == crate::Side::Outside);
                    if let (Id(unknown), true) = (action.reach, fresh[i]) {
                        assert_ne!(shape(&v), Some(unknown), "{case} must find the task: {v}");
                    }
                    fresh[i] = false;
                }
            }
            // No answer to a scoped key names a queue outside its patterns (`billing-*`).
            if key.scoped && expect != Expect::Refused {
                assert!(!v.to_string().contains("billing"), "{case}: {v}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sqs_action_by_every_role_inside_and_outside_its_patterns() {
    let b = Broker::start().await;
    run(&b).await;
    b.stop().await;
}

/// A redrive job belongs to every queue it names. An all-queues admin's job out of a
/// dead-letter queue a scoped key covers into a queue it does not is hidden from that key on
/// both protocols: not listed (its destination would be named) and unknown by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_into_a_foreign_queue_is_hidden_from_a_scoped_key_on_both_protocols() {
    let b = Broker::start().await;
    let fx = b.fixtures().await;
    let (inside, outside) = (&fx.inside, &fx.outside);
    // One job at a time per source: the fixture's own job (of an empty queue) ends first.
    loop {
        let job = b
            .setup(
                reqwest::Method::GET,
                &format!("/v1/redrives/{}", inside.job),
                json!(null),
            )
            .await;
        if job["state"] != "running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let cross = b
        .setup(
            reqwest::Method::POST,
            "/v1/redrives",
            json!({"source": inside.dlq, "destination": outside.queue, "rate_per_second": 1}),
        )
        .await;
    let cross = cross["id"].as_str().expect("job id").to_owned();
    let keys = crate::keys();
    let redrivers = keys.iter().filter(|k| Redrive.allowed(k.role));
    let list = json!({ "SourceArn": arn(&inside.dlq), "MaxResults": 10 });
    for key in redrivers {
        let (status, listed) = as_key(&b, key, "ListMessageMoveTasks", &list).await;
        assert_eq!(status, 200, "{}: {listed}", key.name());
        let handles: Vec<&str> = listed["Results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|t| t["TaskHandle"].as_str())
            .collect();
        let (_, cancelled) = as_key(
            &b,
            key,
            "CancelMessageMoveTask",
            &json!({ "TaskHandle": cross }),
        )
        .await;
        let over_http = b
            .client
            .get(format!("{}/v1/redrives", b.http))
            .bearer_auth(key.secret())
            .send()
            .await
            .expect("list");
        let over_http: Value = over_http.json().await.expect("a listing");
        let by_id = b
            .client
            .get(format!("{}/v1/redrives/{cross}", b.http))
            .bearer_auth(key.secret())
            .send()
            .await
            .expect("get");
        if key.scoped {
            assert!(
                !handles.contains(&cross.as_str()),
                "{}: {listed}",
                key.name()
            );
            assert!(
                !listed.to_string().contains("billing"),
                "{}: {listed}",
                key.name()
            );
            assert_eq!(
                shape(&cancelled),
                Some(NO_TASK),
                "{}: {cancelled}",
                key.name()
            );
            assert!(
                !over_http.to_string().contains("billing"),
                "{}: {over_http}",
                key.name()
            );
            assert_eq!(by_id.status(), 404, "{}", key.name());
        } else {
            assert!(
                handles.contains(&cross.as_str()),
                "{}: {listed}",
                key.name()
            );
            assert_eq!(by_id.status(), 200, "{}", key.name());
        }
    }
    b.stop().await;
}
