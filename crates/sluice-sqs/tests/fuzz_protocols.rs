//! Fuzzing of the SQS front end's decoders, through its router as a client reaches them:
//! the AWS JSON protocol's inputs (`X-Amz-Target` and a JSON body), the query protocol's
//! form parameters (flattened lists and maps, `Attribute.1.Name`), and the SigV4
//! `Authorization` header of an endpoint with keys. Whatever arrives, the answer is an SQS
//! error or a success — never a panic or a 5xx — and comes promptly.
//!
//! Property tests stand in for a coverage-guided fuzzer (stable toolchain only). Each runs a
//! few hundred cases in the ordinary suite; `SLUICE_FUZZ_CASES=N` runs N instead:
//!
//! ```sh
//! SLUICE_FUZZ_CASES=20000 cargo test --release -p sluice-sqs --test fuzz_protocols
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Value, json};
use sluice_core::access::Role;
use sluice_core::store::Store;
use sluice_embedded::{EmbeddedOptions, EmbeddedStore};
use sluice_sqs::{JSON_CONTENT_TYPE, SqsKey, SqsOptions};
use tower::ServiceExt as _;

/// Longest one answer may take (no generated request long-polls).
const BOUND: Duration = Duration::from_secs(10);

/// `cases` in the ordinary suite, or `SLUICE_FUZZ_CASES` for a long run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const ACTIONS: &[&str] = &[
    "CreateQueue",
    "GetQueueUrl",
    "ListQueues",
    "DeleteQueue",
    "PurgeQueue",
    "ListDeadLetterSourceQueues",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "TagQueue",
    "UntagQueue",
    "ListQueueTags",
    "StartMessageMoveTask",
    "ListMessageMoveTasks",
    "CancelMessageMoveTask",
];

/// Members of the operations' inputs. Not `WaitTimeSeconds` nor the queue attribute
/// `ReceiveMessageWaitTimeSeconds` with a valid value: a long poll would only slow the run.
const MEMBERS: &[&str] = &[
    "QueueUrl",
    "QueueName",
    "QueueNamePrefix",
    "MaxResults",
    "NextToken",
    "Attributes",
    "AttributeNames",
    "MessageAttributeNames",
    "MessageSystemAttributeNames",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageDeduplicationId",
    "MessageGroupId",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "ReceiptHandle",
    "Entries",
    "Id",
    "Tags",
    "tags",
    "TagKeys",
    "SourceArn",
    "DestinationArn",
    "MaxNumberOfMessagesPerSecond",
    "TaskHandle",
    "DataType",
    "StringValue",
    "BinaryValue",
    "StringListValues",
    "Name",
    "Value",
    "Key",
];

const QUEUE_ATTRIBUTES: &[&str] = &[
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "VisibilityTimeout",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "All",
    "ApproximateNumberOfMessages",
];

fn member() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::sample::select(MEMBERS).prop_map(str::to_owned),
        1 => "[A-Za-z]{0,12}",
    ]
}

/// Scalars that parsers trip on: numbers at and past their limits, wrong types, queue URLs
/// and ARNs (real and mangled), receipt handles, and anything.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(json!(0), Value::Number)),
        (-3i64..1100).prop_map(Value::from),
        Just(json!("http://localhost/000000000000/jobs")),
        Just(json!("http://localhost/000000000000/jobs.fifo")),
        Just(json!("arn:aws:sqs:us-east-1:000000000000:jobs")),
        "[a-z0-9:/._-]{0,40}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        Just(json!(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs","maxReceiveCount":"3"}"#
        )),
        Just(json!(r#"{"maxReceiveCount":99999999999999999999}"#)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(member(), inner.clone(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            btree_map(
                proptest::sample::select(QUEUE_ATTRIBUTES).prop_map(str::to_owned),
                inner,
                0..3
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON protocol request: its target and body (a structured input, or any bytes).
fn json_request() -> impl Strategy<Value = (String, Vec<u8>)> {
    let action = prop_oneof![
        9 => proptest::sample::select(ACTIONS).prop_map(str::to_owned),
        1 => "[A-Za-z]{0,20}",
    ];
    let body = prop_oneof![
        4 => btree_map(member(), value(), 0..6).prop_map(|m| {
            Value::Object(m.into_iter().collect()).to_string().into_bytes()
        }),
        1 => vec(any::<u8>(), 0..64),
    ];
    (action, body)
}

/// A query protocol request: its form parameters, with flattened names.
fn query_request() -> impl Strategy<Value = Vec<(String, String)>> {
    let action = prop_oneof![
        9 => proptest::sample::select(ACTIONS).prop_map(str::to_owned),
        1 => "[A-Za-z]{0,20}",
    ];
    let index = prop_oneof![
        Just("1".to_owned()),
        Just("2".to_owned()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("4294967296".to_owned()),
        Just(String::new()),
        "[0-9]{1,3}",
    ];
    let name = (
        prop_oneof![
            member(),
            Just("Attribute".to_owned()),
            Just("MessageAttribute".to_owned()),
            Just("SendMessageBatchRequestEntry".to_owned()),
            Just("AttributeName".to_owned()),
            Just("Tag".to_owned()),
        ],
        vec((index, member()), 0..4),
    )
        .prop_map(|(head, tail)| {
            let mut name = head;
            for (i, m) in tail {
                name.push('.');
                name.push_str(&i);
                name.push('.');
                name.push_str(&m);
            }
            name
        });
    let text = prop_oneof![
        "[a-z0-9:/._-]{0,30}",
        Just("http://localhost/000000000000/jobs".to_owned()),
        Just("String".to_owned()),
        any::<String>(),
    ];
    (action, vec((name, text), 0..10)).prop_map(|(action, mut params)| {
        params.insert(0, ("Action".to_owned(), action));
        params
    })
}

/// An `Authorization` header: near misses of SigV4's form, and anything.
fn authorization() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        "[A-Za-z0-9/=;,_ -]{0,40}",
        Just("AKID/20150830/us-east-1/sqs/aws4_request".to_owned()),
        Just("AKID/20150830/us-east-1/sqs/aws4_request/extra".to_owned()),
        Just("AKID//".to_owned()),
        any::<String>(),
    ];
    prop_oneof![
        (part.clone(), part.clone(), part).prop_map(|(c, h, s)| {
            format!("AWS4-HMAC-SHA256 Credential={c}, SignedHeaders={h}, Signature={s}")
        }),
        "[0-9a-f]{0,70}".prop_map(|s| {
            format!(
                "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/sqs/aws4_request, \
                 SignedHeaders=host;x-amz-date;nosuch;HOST;, Signature={s}"
            )
        }),
        any::<String>(),
    ]
}

fn amz_date() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("20150830T123600Z".to_owned()),
        Just("99991231T235959Z".to_owned()),
        Just("00000101T000000Z".to_owned()),
        "[0-9]{8}T[0-9]{6}Z",
        any::<String>(),
    ]
}

async fn store(dir: &std::path::Path) -> Arc<dyn Store> {
    let (store, _) =
        EmbeddedStore::open(dir, EmbeddedOptions::default()).expect("open the embedded store");
    let store: Arc<dyn Store> = Arc::new(store);
    for name in ["jobs", "jobs.dlq"] {
        store
            .put_queue(
                &sluice_core::QueueName::new(name).expect("name"),
                &Default::default(),
            )
            .await
            .expect("create queue");
    }
    store
}

/// Sends `req` to `router`; the status, failing on a 5xx or no answer within [`BOUND`].
async fn answer(router: &Router, req: Request<Body>, what: &str) -> Result<StatusCode, String> {
    let resp = tokio::time::timeout(BOUND, router.clone().oneshot(req))
        .await
        .map_err(|_| format!("{what}: no answer within {BOUND:?}"))?
        .unwrap_or_else(|never| match never {});
    let status = resp.status();
    if status.is_server_error() {
        let body = axum::body::to_bytes(resp.into_body(), 64 * 1024)
            .await
            .unwrap_or_default();
        return Err(format!(
            "{what}: answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(status)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn json_protocol_inputs_are_answered_without_a_server_error() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let router =
        rt.block_on(async { sluice_sqs::router(store(dir.path()).await, SqsOptions::default()) });
    let mut runner = TestRunner::new(config(400));
    let result = runner.run(&json_request(), |(action, body)| {
        let what = format!("{action} {}", String::from_utf8_lossy(&body));
        let req = Request::post("/")
            .header("content-type", JSON_CONTENT_TYPE)
            .header("x-amz-target", format!("AmazonSQS.{action}"))
            .header("host", "localhost")
            .body(Body::from(body))
            .expect("request");
        rt.block_on(answer(&router, req, &what))
            .map_err(TestCaseError::fail)?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn query_protocol_parameters_are_answered_without_a_server_error() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let router =
        rt.block_on(async { sluice_sqs::router(store(dir.path()).await, SqsOptions::default()) });
    let mut runner = TestRunner::new(config(400));
    let result = runner.run(&(query_request(), any::<bool>()), |(params, in_url)| {
        let form: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&params)
            .finish();
        let what = format!("query {form}");
        // Older clients send the parameters in the body, some in the URL, to a queue's URL.
        let req = if in_url {
            Request::get(format!("/000000000000/jobs?{form}"))
                .header("host", "localhost")
                .body(Body::empty())
        } else {
            Request::post("/")
                .header("content-type", "application/x-www-form-urlencoded")
                .header("host", "localhost")
                .body(Body::from(form))
        }
        .expect("request");
        rt.block_on(answer(&router, req, &what))
            .map_err(TestCaseError::fail)?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn signatures_are_refused_without_a_server_error() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let options = SqsOptions {
        keys: vec![SqsKey {
            access_key_id: "AKID".to_owned(),
            secret_access_key: "secret".to_owned(),
            role: Role::Admin,
            queues: vec!["*".to_owned()],
        }],
        ..SqsOptions::default()
    };
    let router = rt.block_on(async { sluice_sqs::router(store(dir.path()).await, options) });
    let mut runner = TestRunner::new(config(400));
    let result = runner.run(
        &(
            authorization(),
            amz_date(),
            any::<bool>(),
            "[a-zA-Z0-9=&%+.]{0,30}",
        ),
        |(auth, date, json, query)| {
            let mut req = Request::post(format!("/?{query}")).header("host", "localhost");
            // Header values must be visible ASCII; others cannot arrive in a header at all.
            if axum::http::HeaderValue::from_str(&auth).is_ok() {
                req = req.header("authorization", auth.as_str());
            }
            if axum::http::HeaderValue::from_str(&date).is_ok() {
                req = req.header("x-amz-date", date.as_str());
            }
            let req = if json {
                req.header("content-type", JSON_CONTENT_TYPE)
                    .header("x-amz-target", "AmazonSQS.ListQueues")
                    .body(Body::from("{}"))
            } else {
                req.header("content-type", "application/x-www-form-urlencoded")
                    .body(Body::from("Action=ListQueues"))
            }
            .expect("request");
            let status = rt
                .block_on(answer(&router, req, &format!("{auth} / {date}")))
                .map_err(TestCaseError::fail)?;
            // No generated signature is right.
            prop_assert!(status.is_client_error(), "{} / {}: {}", auth, date, status);
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
