//! The web console in a real browser: Debian's headless Chromium driven through ChromeDriver
//! (WebDriver), against a real broker on an ephemeral loopback port.
//!
//! Without Chromium and ChromeDriver these tests say so loudly and pass, unless `CI=true`,
//! where they fail (`.ci/run` installs both). To refresh the screenshots in `docs/console/`:
//!
//! ```sh
//! SLUICE_CONSOLE_SCREENSHOTS=$PWD/docs/console cargo test -p sluice-server --test console
//! ```

mod common;
#[path = "console/keys.rs"]
mod keys;
#[path = "console/redrive.rs"]
mod redrive;

use std::time::{Duration, Instant};

use fantoccini::Locator;
use reqwest::Method;
use serde_json::{Value, json};
use sluice_server::{ApiKeyConfig, KeyRing, Role, ServerOptions};
use sluice_testkit::browser::browser;

/// `n` messages sent to `queue` (one attempt allowed), received and rejected with `error`.
async fn dead_letters(s: &common::TestServer, queue: &str, n: usize, error: &str) {
    let msgs: Vec<Value> = (0..n)
        .map(|i| json!({"body": {"n": i}, "attributes": {"tenant": format!("t{}", i % 2)}}))
        .collect();
    reject_sent(s, queue, msgs, error).await;
}

/// `msgs` (send request messages) sent to `queue` (one attempt allowed), received and rejected
/// with `error`.
async fn reject_sent(s: &common::TestServer, queue: &str, msgs: Vec<Value>, error: &str) {
    let n = msgs.len();
    let (code, v) = s
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            Some(json!({"messages": msgs})),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    for m in s
        .receive(queue, json!({"max": n, "visibility_timeout_ms": 60_000}))
        .await
    {
        let (code, v) = s
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/reject"),
                Some(json!({"receipt": m["receipt"], "error": error})),
            )
            .await;
        assert_eq!(code, 200, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_and_queue_page_show_the_numbers_and_act_with_confirmation() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("payments", json!({"max_receive_count": 1}))
        .await;
    s.put_queue("emails", json!({})).await;
    for i in 0..10 {
        s.send("payments", json!({"order": i})).await;
    }
    for i in 0..3 {
        s.send("emails", json!(i)).await;
    }
    let leased = s.receive("payments", json!({"max": 4})).await;
    for m in &leased[..2] {
        let (code, _) = s
            .call(
                Method::POST,
                "/v1/queues/payments/nack",
                Some(json!({"receipt": m["receipt"], "error": "HTTP 429"})),
            )
            .await;
        assert_eq!(code, 200);
    }

    b.client.goto(&s.url("/")).await.expect("open the console");
    let row = b
        .text_when("tr[data-queue='payments']", |t| t.contains("payments"))
        .await;
    // visible 6, in flight 2, delayed 0, DLQ 2.
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..5], ["payments", "6", "2", "0", "2"], "{row}");
    let dlq = b.text_when("tr[data-queue='payments.dlq']", |_| true).await;
    assert!(
        dlq.starts_with("payments.dlqDLQ 2 0 0"),
        "a DLQ badge: {dlq}"
    );
    let emails = b.text_when("tr[data-queue='emails']", |_| true).await;
    assert!(emails.starts_with("emails 3 0 0 0"), "{emails}");
    assert_eq!(b.count("tbody tr").await, 4, "two queues and their DLQs");
    // Its DLQ just grew: payments is highlighted, emails is not. Stats are sampled every
    // 10 s, so a loaded machine may need more than one sample before the trend shows.
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.count("tr.alert[data-queue='payments']").await == 0 {
        assert!(Instant::now() < deadline, "payments was not highlighted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(b.count("tr.alert").await, 1, "only payments");
    b.screenshot("overview.png").await;

    let filter = b
        .client
        .find(Locator::Css("#filter"))
        .await
        .expect("filter");
    filter.send_keys("pay").await.expect("type");
    b.text_when("#queues tbody", |t| !t.contains("emails"))
        .await;
    assert_eq!(b.count("tbody tr").await, 2, "payments and payments.dlq");

    // Sorting by DLQ depth, largest first.
    b.click("th[data-sort='dlq']").await;
    let first = b.text_when("#queues tbody tr", |_| true).await;
    assert!(first.starts_with("payments "), "{first}");

    // The queue page: stats, charts, and purge with a confirmation naming the count.
    b.click("tr[data-queue='payments'] a").await;
    b.text_when("[data-stat='visible']", |t| t.contains('6'))
        .await;
    assert_eq!(
        b.count(".chart svg").await,
        3,
        "backlog, in flight, dead letters"
    );
    b.screenshot("queue.png").await;
    b.click("#purge").await;
    let question = b.text_when(".confirm p", |_| true).await;
    assert_eq!(
        question,
        "Purge 8 messages from payments? They are deleted for good."
    );
    b.click("#confirm").await;
    b.text_when(".ok", |t| t.contains("Purged 8 messages"))
        .await;
    assert_eq!(s.stats("payments").await["visible"], 0);

    // A configuration the broker refuses shows its reason inline; a good one is saved.
    let field = b
        .client
        .find(Locator::Css("input[name='max_receive_count']"))
        .await
        .expect("field");
    field.clear().await.expect("clear");
    field.send_keys("5000").await.expect("type");
    b.click("button[form='config']").await;
    let err = b.text_when("#config-out .error", |t| !t.is_empty()).await;
    assert!(err.contains("max_receive_count"), "{err}");
    field.clear().await.expect("clear");
    field.send_keys("3").await.expect("type");
    b.click("button[form='config']").await;
    b.text_when("#config-out .ok", |t| t == "Saved.").await;
    let (_, q) = s.call(Method::GET, "/v1/queues/payments", None).await;
    assert_eq!(q["config"]["max_receive_count"], 3);
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_shown_as_text_and_never_run() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("web", json!({})).await;
    let json_id = s
        .send(
            "web",
            json!({"html": "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"}),
        )
        .await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/web/messages",
            Some(json!({"messages": [{"body_base64": "PHNjcmlwdD53aW5kb3cucHduZWQ9Mzwvc2NyaXB0Pg=="}]})),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let bytes_id = v["ids"][0].as_str().expect("id").to_owned();
    // One failed delivery, received by a named worker: its attempt says who and how long.
    let got = s.receive("web", json!({"consumer": "worker-7"})).await;
    assert_eq!(got[0]["id"], json!(json_id));
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/web/nack",
            Some(json!({"receipt": got[0]["receipt"], "error": "boom", "delay_ms": 0})),
        )
        .await;
    assert_eq!(code, 200, "{v}");

    b.client
        .goto(&s.url(&format!("/#/messages/{json_id}")))
        .await
        .expect("open");
    let attempt = b
        .text_when("#attempts tbody", |t| t.contains("worker-7"))
        .await;
    assert!(
        attempt.contains("nacked") && attempt.contains("boom") && attempt.contains(" ms"),
        "the attempt names its worker and how long it ran: {attempt}"
    );
    let body = b.text_when("#body", |t| t.contains("script")).await;
    assert!(
        body.contains("<script>window.pwned = 1</script>"),
        "shown as text: {body}"
    );
    assert_eq!(b.count("#body img, #body script").await, 0);
    b.screenshot("message.png").await;
    b.client
        .goto(&s.url(&format!("/#/messages/{bytes_id}")))
        .await
        .expect("open");
    let hex = b.text_when("#body", |t| t.contains("3c 73 63")).await;
    assert!(hex.contains("<script>window"), "bytes as a hex dump: {hex}");
    let pwned = b
        .client
        .execute("return window.pwned === undefined;", vec![])
        .await
        .expect("execute");
    assert_eq!(pwned, json!(true), "no payload ran");
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_key_sees_no_redrive_and_other_origins_cannot_write() {
    let Some(b) = browser().await else { return };
    let key = |name: &str, role, secret: &str| ApiKeyConfig {
        name: name.into(),
        role,
        queues: vec!["*".into()],
        sha256: sluice_server::auth::hash_secret(secret),
    };
    let keys = KeyRing::new(vec![
        key("ops", Role::Admin, "admin-secret"),
        key("worker", Role::Consumer, "consumer-secret"),
    ])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let admin = Some("admin-secret");
    let (code, _) = s
        .call_as(
            admin,
            Method::PUT,
            "/v1/queues/payments",
            Some(json!({"max_receive_count": 1})),
        )
        .await;
    assert!(code.is_success(), "{code}");

    b.client.goto(&s.url("/")).await.expect("open");
    let key_input = b
        .client
        .wait()
        .for_element(Locator::Css("#key"))
        .await
        .expect("the console asks for a key");
    key_input.send_keys("consumer-secret").await.expect("type");
    b.click("form button[type='submit']").await;
    b.text_when("#who", |t| t.contains("worker")).await;
    b.client
        .goto(&s.url("/#/dlq/payments.dlq"))
        .await
        .expect("open");
    let err = b.text_when(".error", |t| !t.is_empty()).await;
    assert!(err.contains("consumer"), "{err}");
    assert_eq!(b.count("button.redrive, #redrive-all").await, 0);

    // A call forged from the page with the consumer's key is refused by the broker.
    let status = b
        .client
        .execute_async(
            "const done = arguments[0];
             fetch('/v1/redrives', {method: 'POST',
               headers: {'Authorization': 'Bearer consumer-secret', 'Content-Type': 'application/json'},
               body: JSON.stringify({source: 'payments.dlq'})}).then(r => done(r.status));",
            vec![],
        )
        .await
        .expect("forged call");
    assert_eq!(status, json!(403));

    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_broker_refuses_writes_from_other_origins() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("payments", json!({})).await;
    // A page of another origin (another port of the same host) posts to the broker, as a
    // malicious site open in the operator's browser would.
    let page = axum::Router::new().route(
        "/",
        axum::routing::get(|| async {
            axum::response::Html(
                "<script>
                   const target = new URLSearchParams(location.search).get('target');
                   fetch(target, {method: 'POST', mode: 'no-cors'})
                     .then(() => { document.title = 'sent'; }, e => { document.title = 'error ' + e; });
                 </script>",
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
    let target = s.url("/v1/queues/payments/pause");
    b.client
        .goto(&format!("{other}/?target={target}"))
        .await
        .expect("open the other origin's page");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let title = b.client.title().await.expect("title");
        if title == "sent" {
            break;
        }
        assert!(
            Instant::now() < deadline && !title.starts_with("error"),
            "the other page's request: {title:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!paused(&s).await, "the cross-origin write was refused");

    // The same call from the console's own origin is carried out.
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#who", |t| t.contains("no API keys")).await;
    let sent = b
        .client
        .execute_async(
            "const done = arguments[0];
             fetch('/v1/queues/payments/pause', {method: 'POST'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .expect("script");
    assert_eq!(sent, json!(200));
    assert!(paused(&s).await, "a same-origin write goes through");
    server.abort();
    b.close().await;
    s.shutdown().await;
}

async fn paused(s: &common::TestServer) -> bool {
    let (_, q) = s.call(Method::GET, "/v1/queues/payments", None).await;
    q["config"]["paused"].as_bool().expect("paused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_with_a_strict_policy() {
    let s = common::start().await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/charts.js", "text/javascript"),
        ("/console/pages/dlq.js", "text/javascript"),
        ("/console/style.css", "text/css"),
    ] {
        let resp = s.client.get(s.url(path)).send().await.expect("get");
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        let header = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        let csp = header("content-security-policy");
        for rule in [
            "default-src 'none'",
            "script-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(rule), "{path}: {csp}");
        }
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
    }
    let (code, v) = s.call(Method::GET, "/console/nothing.js", None).await;
    assert_eq!(code, 404, "{v}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_looked_up_and_followed_live() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("inference", json!({})).await;
    let id = s.send("inference", json!({"prompt": "hello"})).await;
    b.client.goto(&s.url("/#/tasks")).await.expect("open");
    b.client
        .wait()
        .for_element(Locator::Css("#task-id"))
        .await
        .expect("lookup field")
        .send_keys(&id)
        .await
        .expect("type");
    b.click("form button[type='submit']").await;
    b.text_when("#task-status", |t| t == "PENDING").await;
    assert_eq!(
        b.count("#cancel-task").await,
        1,
        "a waiting task can be cancelled"
    );
    // A worker takes it and finishes it; the page follows the task's status events.
    let got = s.receive("inference", json!({"max": 1})).await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/inference/ack",
            Some(json!({"receipt": got[0]["receipt"], "result": {"answer": 42}})),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    b.text_when("#task-status", |t| t == "SUCCESS").await;
    let result = b.text_when("#task pre", |t| t.contains("answer")).await;
    assert!(result.contains("42"), "{result}");
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_hundreds_of_queues_draws_the_first_and_the_rest_on_request() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    for i in 0..160 {
        let name = sluice_core::QueueName::new(format!("tenant-{i:03}")).expect("name");
        s.store
            .put_queue(&name, &sluice_core::QueueConfigPatch::default())
            .await
            .expect("queue");
    }
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#queues", |t| t.contains("tenant-000")).await;
    assert_eq!(
        b.count("#queues tbody tr").await,
        300,
        "320 queues, 300 drawn"
    );
    b.click("#show-all").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.count("#queues tbody tr").await != 320 {
        assert!(Instant::now() < deadline, "show all drew every queue");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_more_queues_than_a_page_is_read_a_thousand_at_a_time() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    let patch = sluice_core::QueueConfigPatch {
        max_receive_count: Some(0),
        dead_letter_queue: Some(None),
        ..Default::default()
    };
    for i in 0..1050 {
        let name = sluice_core::QueueName::new(format!("tenant-{i:04}")).expect("name");
        s.store.put_queue(&name, &patch).await.expect("queue");
    }
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#overview-status", |t| {
        t.starts_with("queues 1–1,000 by name")
    })
    .await;
    assert_eq!(b.count("#previous-page").await, 0, "the first page");
    b.click("#show-all").await;
    b.text_when("#queues", |t| t.contains("tenant-0999")).await;
    assert!(
        !b.text_when("#queues", |_| true)
            .await
            .contains("tenant-1000")
    );

    b.click("#next-page").await;
    b.text_when("#overview-status", |t| t.starts_with("queues 1,001–1,050"))
        .await;
    assert_eq!(b.count("#queues tbody tr").await, 50);
    assert_eq!(b.count("#next-page").await, 0, "the last page");
    b.screenshot("overview-pages.png").await;
    b.click("#previous-page").await;
    b.text_when("#overview-status", |t| t.starts_with("queues 1–1,000"))
        .await;

    // The filter is the names' prefix, read from the broker across every page.
    let filter = b
        .client
        .find(Locator::Css("#filter"))
        .await
        .expect("filter");
    filter.send_keys("tenant-104").await.expect("type");
    b.text_when("#overview-status", |t| t.starts_with("10 queues"))
        .await;
    assert_eq!(b.count("#queues tbody tr").await, 10);
    assert_eq!(
        b.count("#next-page").await + b.count("#previous-page").await,
        0
    );
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_left_while_loading_never_draws_over_the_next() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue("payments", json!({})).await;
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#queues", |t| t.contains("payments")).await;
    // The queue page's first answers come late; the operator moves on before they do.
    b.client
        .execute(
            "const orig = window.fetch;
             window.fetch = (url, opts) => String(url).startsWith('/v1/queues/payments')
               ? new Promise((r) => setTimeout(r, 1500)).then(() => orig(url, opts))
               : orig(url, opts);
             location.hash = '#/queues/payments';
             setTimeout(() => { location.hash = '#/redrives'; }, 200);",
            vec![],
        )
        .await
        .expect("script");
    b.text_when("h1", |t| t == "Redrives").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        b.text_when("h1", |_| true).await,
        "Redrives",
        "the queue page, answered late, stayed away"
    );
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_asks_once_and_the_live_page_stops() {
    let Some(b) = browser().await else { return };
    let keys = KeyRing::new(vec![ApiKeyConfig {
        name: "ops".into(),
        role: Role::Admin,
        queues: vec!["*".into()],
        sha256: sluice_server::auth::hash_secret("admin-secret"),
    }])
    .expect("keys");
    let s = common::start_with(ServerOptions {
        keys,
        ..ServerOptions::default()
    })
    .await;
    let (code, _) = s
        .call_as(
            Some("admin-secret"),
            Method::PUT,
            "/v1/queues/payments",
            Some(json!({})),
        )
        .await;
    assert!(code.is_success(), "{code}");
    b.client
        .goto(&s.url("/#/queues/payments"))
        .await
        .expect("open");
    b.client
        .wait()
        .for_element(Locator::Css("#key"))
        .await
        .expect("asks for a key")
        .send_keys("admin-secret")
        .await
        .expect("type");
    b.click("form button[type='submit']").await;
    b.text_when("h1", |t| t == "Queue payments").await;
    // The key is withdrawn while the page polls (two timers: numbers and history).
    b.client
        .execute("sessionStorage.setItem('sluice.key', 'revoked');", vec![])
        .await
        .expect("script");
    b.text_when("h1", |t| t == "Sign in").await;
    let key = b
        .client
        .find(Locator::Css("#key"))
        .await
        .expect("key field");
    key.send_keys("half-typed").await.expect("type");
    // Both timers have fired again by now; neither redraws the form nor the page.
    tokio::time::sleep(Duration::from_millis(11_000)).await;
    let key = b
        .client
        .find(Locator::Css("#key"))
        .await
        .expect("key field");
    assert_eq!(
        key.prop("value").await.expect("value").as_deref(),
        Some("half-typed"),
        "what the operator typed is kept"
    );
    assert_eq!(b.count("#key").await, 1);
    b.close().await;
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_values_sort_last_and_status_events_are_read_whole() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    b.client.goto(&s.url("/")).await.expect("open");
    b.text_when("#who", |t| !t.is_empty()).await;
    let got = b
        .client
        .execute_async(
            "const done = arguments[0];
             Promise.all([import('/console/pages/overview.js'), import('/console/pages/tasks.js')])
               .then(([o, t]) => {
                 const rows = [{v: 3}, {v: null}, {v: 10}, {v: undefined}, {v: 1}];
                 const up = [...rows].sort(o.byColumn((r) => r.v, true)).map((r) => r.v ?? null);
                 const down = [...rows].sort(o.byColumn((r) => r.v, false)).map((r) => r.v ?? null);
                 const [events, rest] = t.sseEvents(
                   'event: status\\ndata: {\"a\":1}\\n\\n: keep-alive\\n\\nevent: error\\ndata: gone\\n\\nevent: sta');
                 done({up, down, events, rest});
               }, (e) => done(String(e)));",
            vec![],
        )
        .await
        .expect("script");
    assert_eq!(got["up"], json!([1, 3, 10, null, null]));
    assert_eq!(got["down"], json!([10, 3, 1, null, null]));
    assert_eq!(
        got["events"],
        json!([{"type": "status", "data": "{\"a\":1}"}, {"type": "error", "data": "gone"}])
    );
    assert_eq!(got["rest"], "event: sta");
    b.close().await;
    s.shutdown().await;
}

/// A governed queue's page shows its adaptive rate and breaker with its transitions and a
/// chart of both; Force open opens it; a refused force shows the broker's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_queue_shows_its_rate_and_breaker_and_is_forced_open() {
    let Some(b) = browser().await else { return };
    let s = common::start().await;
    s.put_queue(
        "calls",
        json!({
            "rate_limit": {"limit": 600, "period_ms": 60_000},
            "adaptive": {"min_per_min": 60, "max_per_min": 6000},
            "breaker": {"min_calls": 10},
        }),
    )
    .await;
    // A history: forced open and closed again, and a Retry-After holding deliveries.
    for state in ["open", "closed"] {
        let (code, v) = s
            .call(
                Method::POST,
                "/v1/queues/calls/breaker",
                Some(json!({ "state": state })),
            )
            .await;
        assert_eq!(code, 200, "{v}");
    }
    s.send("calls", json!(1)).await;
    let got = s.receive("calls", json!({"max": 1})).await;
    let (code, v) = s
        .call(
            Method::POST,
            "/v1/queues/calls/nack",
            Some(json!({"receipt": got[0]["receipt"], "retry_after_ms": 120_000})),
        )
        .await;
    assert_eq!(code, 200, "{v}");

    b.client
        .goto(&s.url("/#/queues/calls"))
        .await
        .expect("open the queue");
    b.text_when("#breaker-state", |t| t == "closed").await;
    // Label and value sit in a grid: one space between words, whatever the layout.
    let words = |t: String| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let rate = words(b.text_when("#adaptive", |t| t.contains("/min")).await);
    assert!(rate.contains("60/min"), "{rate}");
    assert!(rate.contains("60 – 6,000/min"), "{rate}");
    assert!(rate.contains("rate_limit ceiling 600/min"), "{rate}");
    assert!(rate.contains("congestion 1 signal, 0 decreases"), "{rate}");
    let hold = b.text_when("#adaptive-hold", |t| !t.is_empty()).await;
    assert!(
        hold.starts_with("for 1m") || hold.starts_with("for 2m"),
        "{hold}"
    );
    let breaker = words(b.text_when("#breaker", |t| t.contains("opened")).await);
    assert!(breaker.contains("opened 1 time, "), "{breaker}");
    assert!(breaker.contains("window 0% of 1 call failed"), "{breaker}");
    assert_eq!(
        b.count("#transitions tbody tr").await,
        2,
        "open, then closed again"
    );
    let newest = b.text_when("#transitions tbody tr", |_| true).await;
    assert!(newest.contains("open → closed"), "{newest}");
    assert!(newest.contains("forced by an operator"), "{newest}");
    assert_eq!(
        b.count("#flow .chart svg").await,
        2,
        "rate and breaker state"
    );
    b.screenshot("queue-flow.png").await;

    b.click("#force-open").await;
    b.text_when("#breaker-state", |t| t == "open").await;
    b.text_when("#breaker-forced", |t| t == "forced").await;
    b.text_when("#flow-out .ok", |t| t.contains("forced open"))
        .await;
    let st = s.stats("calls").await;
    assert_eq!(st["flow"]["breaker"]["state"], "open", "{st}");
    assert_eq!(st["flow"]["breaker"]["forced"], true, "{st}");
    b.screenshot("queue-flow-open.png").await;

    // Gone under the page's feet: the force is refused and the reason shows.
    let (code, _) = s.call(Method::DELETE, "/v1/queues/calls", None).await;
    assert_eq!(code, 204);
    b.click("#force-closed").await;
    let err = b.text_when("#flow-out .error", |t| !t.is_empty()).await;
    assert!(
        err.contains("calls") && err.contains("does not exist"),
        "{err}"
    );
    b.close().await;
    s.shutdown().await;
}
