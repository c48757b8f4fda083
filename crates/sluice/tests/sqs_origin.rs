//! The keyless SQS listener (`sluice serve --sqs-listen` without `[[sqs_keys]]`) answers SDKs
//! and the AWS CLI, and nothing a browser page of another origin sends: neither a form's POST
//! nor a query-protocol GET (an image, a `no-cors` fetch) can delete or purge a queue, and a
//! request for a host the broker does not answer to (a name pointed at 127.0.0.1 by DNS
//! rebinding) is refused, in SQS's own error format.
//!
//! The browser test needs Chromium and ChromeDriver; without them it says so loudly and
//! passes, unless `CI=true`.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::browser::browser;

/// An AWS JSON 1.0 call to the endpoint `sqs`, sent for `host` (the `Host` header), as a
/// client that is not a browser sends it; returns the status and the answer's JSON.
async fn call(sqs: &str, host: Option<&str>, action: &str, input: Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{sqs}/"))
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", format!("AmazonSQS.{action}"))
        .body(input.to_string());
    if let Some(host) = host {
        req = req.header("host", host);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("answer");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The number of messages in the queue at `url`, read as an SDK would.
async fn depth(sqs: &str, url: &str) -> u64 {
    let (status, v) = call(
        sqs,
        None,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    v["Attributes"]["ApproximateNumberOfMessages"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a depth: {v}"))
}

/// Creates `name` holding `messages` messages; returns its URL.
async fn queue_with(sqs: &str, name: &str, messages: usize) -> String {
    let (status, v) = call(sqs, None, "CreateQueue", json!({"QueueName": name})).await;
    assert_eq!(status, 200, "{v}");
    let url = v["QueueUrl"].as_str().expect("a queue URL").to_owned();
    for i in 0..messages {
        let (status, v) = call(
            sqs,
            None,
            "SendMessage",
            json!({"QueueUrl": url, "MessageBody": format!("m{i}")}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
    }
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_sqs_listener_answers_only_the_hosts_it_is_reached_by() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, _url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &["--sqs-public-url", "https://sqs.example.test:8443"],
    );
    let port = sqs.rsplit(':').next().expect("a port");
    let url = queue_with(&sqs, "kept", 1).await;

    // A name pointed at 127.0.0.1 by someone else: refused, the queue untouched, in the
    // protocol's own error format.
    let evil = format!("evil.example:{port}");
    let (status, v) = call(&sqs, Some(&evil), "DeleteQueue", json!({"QueueUrl": url})).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(
        v["__type"], "com.amazonaws.sqs#AccessDeniedException",
        "{v}"
    );
    let message = v["message"].as_str().expect("a message");
    assert!(
        message.contains("evil.example") && message.contains("[[sqs_keys]]"),
        "{message}"
    );
    let resp = reqwest::Client::new()
        .post(format!("{sqs}/"))
        .header("host", &evil)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "Action=PurgeQueue&QueueUrl={}",
            url.replace(':', "%3A").replace('/', "%2F")
        ))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 403);
    let xml = resp.text().await.expect("answer");
    assert!(xml.contains("<Code>AccessDenied</Code>"), "{xml}");
    assert_eq!(depth(&sqs, &url).await, 1, "nothing was purged");

    // The names the broker is reached by: loopback ones and its public URL's.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "sqs.example.test:8443".to_owned(),
    ] {
        let (status, v) = call(&sqs, Some(&host), "ListQueues", json!({})).await;
        assert_eq!(status, 200, "{host}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_cannot_act_on_the_keyless_sqs_listener() {
    let Some(b) = browser().await else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, _url, sqs) = common::serve_with_sqs(&dir.path().join("data"), Stdio::null());
    let doomed = queue_with(&sqs, "doomed", 1).await;
    let purged = queue_with(&sqs, "purged", 2).await;

    // A page of another origin (another port of the same host, so the browser calls it
    // same-site) tries what the probe did, without sending a Referer: query-protocol GETs
    // through an image and a `no-cors` fetch, a form's POST into a frame, and a `no-cors`
    // form-encoded fetch.
    let page = axum::Router::new().route(
        "/",
        axum::routing::get(|| async {
            axum::response::Html(
                r#"<!doctype html><meta name="referrer" content="no-referrer">
<iframe name="sink"></iframe>
<form id="f" method="POST" target="sink"><input type="hidden" name="Action" value="DeleteQueue"><input type="hidden" name="QueueUrl"></form>
<script>
  const q = new URLSearchParams(location.search);
  const sqs = q.get('sqs'), doomed = q.get('doomed'), purged = q.get('purged');
  const get = (action, url) => sqs + '/?Action=' + action + '&QueueUrl=' + encodeURIComponent(url);
  const image = src => new Promise(done => { const i = new Image(); i.onload = i.onerror = done; i.src = src; });
  const form = () => new Promise(done => {
    const f = document.getElementById('f');
    f.action = sqs + '/';
    f.elements.QueueUrl.value = doomed;
    document.querySelector('iframe').onload = done;
    f.submit();
  });
  Promise.allSettled([
    image(get('PurgeQueue', purged)),
    fetch(get('DeleteQueue', doomed), {mode: 'no-cors'}),
    fetch(sqs + '/', {method: 'POST', mode: 'no-cors',
      body: new URLSearchParams({Action: 'PurgeQueue', QueueUrl: purged})}),
    form(),
  ]).then(() => { document.title = 'sent'; });
</script>"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let other = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, page).await;
    });
    let query = |v: &str| v.replace(':', "%3A").replace('/', "%2F");
    b.client
        .goto(&format!(
            "{other}/?sqs={}&doomed={}&purged={}",
            query(&sqs),
            query(&doomed),
            query(&purged)
        ))
        .await
        .expect("open the other origin's page");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let title = b.client.title().await.expect("title");
        if title == "sent" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other page's requests did not settle; title {title:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(depth(&sqs, &doomed).await, 1, "the queue was not deleted");
    assert_eq!(depth(&sqs, &purged).await, 2, "the queue was not purged");

    // The endpoint still serves what a person opens in the browser themselves.
    b.client
        .goto(&format!("{sqs}/?Action=ListQueues"))
        .await
        .expect("open the endpoint");
    let source = b.client.source().await.expect("page source");
    assert!(source.contains("ListQueuesResponse"), "{source}");
    server.abort();
    b.close().await;
}
