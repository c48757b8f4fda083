//! The built `sluice` binary against a live `sluice serve`: destructive queue commands ask
//! first (or need `--yes`), `queue delete` says what becomes of the DLQ, `queue create` does
//! not overwrite an existing queue, and `message show` tells a dead letter for what it is.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod common;

use common::{BIN, broker};

fn run(url: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env("SLUICE_URL", url)
        .env_remove("SLUICE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait for sluice")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs with an empty stdin (not a terminal); asserts exit `code`; answers (stdout, stderr).
fn exits(url: &str, args: &[&str], code: i32) -> (String, String) {
    let out = run(url, args, b"");
    assert_eq!(
        out.status.code(),
        Some(code),
        "sluice {args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    (text(&out.stdout), text(&out.stderr))
}

fn ok(url: &str, args: &[&str]) -> (String, String) {
    exits(url, args, 0)
}

fn json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (out, _) = ok(url, &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

fn depth(url: &str, queue: &str) -> u64 {
    let s = json(url, &["stats", queue]);
    ["visible", "delayed", "in_flight"]
        .iter()
        .map(|k| s[k].as_u64().expect("gauge"))
        .sum()
}

fn exists(url: &str, queue: &str) -> bool {
    let out = run(url, &["queue", "show", queue], b"");
    match out.status.code() {
        Some(0) => true,
        Some(3) => false,
        other => panic!("queue show {queue}: {other:?} {}", text(&out.stderr)),
    }
}

/// `n` messages in `queue`: visible, two delayed and two in flight.
fn fill(url: &str, queue: &str, n: usize) {
    let lines: String = (0..n - 2).map(|i| format!("{i}\n")).collect();
    let out = run(url, &["send", queue, "-"], lines.as_bytes());
    assert!(out.status.success(), "send: {}", text(&out.stderr));
    for _ in 0..2 {
        ok(url, &["send", queue, "later", "--delay", "1h"]);
    }
    let got = json(url, &["receive", queue, "--max", "2"]);
    assert_eq!(got["messages"].as_array().map(Vec::len), Some(2));
}

#[test]
fn delete_and_purge_of_a_non_empty_queue_need_yes_without_a_terminal() {
    let b = broker();
    let u = b.url.as_str();
    ok(u, &["queue", "create", "payments"]);
    fill(u, "payments", 1204);
    assert_eq!(depth(u, "payments"), 1204);

    let (_, err) = exits(u, &["queue", "delete", "payments"], 2);
    assert!(
        err.contains("payments holds 1,204 messages") && err.contains("--yes"),
        "{err}"
    );
    assert!(exists(u, "payments"), "nothing deleted without --yes");

    let (_, err) = exits(u, &["queue", "purge", "payments"], 2);
    assert!(
        err.contains("payments holds 1,204 messages") && err.contains("--yes"),
        "{err}"
    );
    assert_eq!(depth(u, "payments"), 1204, "nothing purged without --yes");

    let (out, _) = ok(u, &["queue", "purge", "payments", "--yes"]);
    assert!(out.contains("purged 1204 messages"), "{out}");
    // Empty now: no confirmation needed.
    ok(u, &["queue", "purge", "payments"]);

    // An empty queue is deleted at once; its DLQ is kept, and the command says so.
    let (out, err) = ok(u, &["queue", "delete", "payments"]);
    assert!(out.contains("deleted queue payments"), "{out}");
    assert!(
        err.contains("kept its dead-letter queue payments.dlq")
            && err.contains("sluice queue delete payments.dlq"),
        "{err}"
    );
    assert!(exists(u, "payments.dlq"));
    assert!(!exists(u, "payments"));
}

#[test]
fn delete_with_dlq_counts_and_deletes_the_dlq_too() {
    let b = broker();
    let u = b.url.as_str();
    ok(u, &["queue", "create", "jobs"]);
    ok(u, &["send", "jobs", "a"]);
    ok(u, &["send", "jobs", "poison"]);
    let got = json(u, &["receive", "jobs", "--max", "1"]);
    let receipt = got["messages"][0]["receipt"].as_str().expect("receipt");
    ok(u, &["reject", "jobs", receipt, "--error", "bad"]);
    assert_eq!((depth(u, "jobs"), depth(u, "jobs.dlq")), (1, 1));

    let (_, err) = exits(u, &["queue", "delete", "jobs", "--with-dlq"], 2);
    assert!(
        err.contains("jobs holds 1 message and its dead-letter queue jobs.dlq 1 message"),
        "{err}"
    );
    assert!(exists(u, "jobs") && exists(u, "jobs.dlq"));

    let v = json(u, &["queue", "delete", "jobs", "--with-dlq", "--yes"]);
    assert_eq!(v["deleted"], "jobs");
    assert_eq!(v["deleted_dlq"], "jobs.dlq");
    assert!(!exists(u, "jobs") && !exists(u, "jobs.dlq"));

    // Without --with-dlq, only the DLQ's messages are not counted.
    ok(u, &["queue", "create", "solo"]);
    ok(u, &["send", "solo.dlq", "x"]);
    let (out, err) = ok(u, &["queue", "delete", "solo"]);
    assert!(out.contains("deleted queue solo"), "{out}");
    assert!(
        err.contains("kept its dead-letter queue solo.dlq (1 message)"),
        "{err}"
    );
}

/// Runs `sluice args` with a terminal for stdin and stdout (through `script`), typing
/// `answer`; `None` when `script` is not installed.
fn at_terminal(url: &str, args: &str, answer: &str) -> Option<(Option<i32>, String)> {
    let mut child = match Command::new("script")
        .args(["-qec", &format!("{BIN} {args}"), "/dev/null"])
        .env("SLUICE_URL", url)
        .env_remove("SLUICE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED: the prompt at a terminal needs `script` (util-linux): {e}");
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "`script` is missing under CI"
            );
            return None;
        }
    };
    // Typed once the prompt is up; script passes it to the terminal.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(answer.as_bytes()).expect("type");
    stdin.flush().expect("flush");
    std::thread::sleep(std::time::Duration::from_millis(800));
    drop(stdin);
    let out = child.wait_with_output().expect("wait for script");
    Some((out.status.code(), text(&out.stdout)))
}

#[test]
fn at_a_terminal_delete_asks_naming_the_count() {
    let b = broker();
    let u = b.url.as_str();
    ok(u, &["queue", "create", "payments"]);
    for i in 0..3 {
        ok(u, &["send", "payments", &i.to_string()]);
    }
    let Some((code, screen)) = at_terminal(u, "queue delete payments", "n\n") else {
        return;
    };
    assert!(
        screen.contains("Delete queue payments with 3 messages? [y/N]"),
        "{screen}"
    );
    assert_eq!(code, Some(1), "{screen}");
    assert!(exists(u, "payments"), "a no keeps the queue");

    let (code, screen) = at_terminal(u, "queue delete payments", "y\n").expect("script");
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("deleted queue payments"), "{screen}");
    assert!(!exists(u, "payments"));
}

#[test]
fn create_refuses_an_existing_queue_unless_update() {
    let b = broker();
    let u = b.url.as_str();
    ok(
        u,
        &["queue", "create", "orders", "--max-receive-count", "3"],
    );
    let (_, err) = exits(
        u,
        &["queue", "create", "orders", "--max-receive-count", "9"],
        4,
    );
    assert!(
        err.contains("queue \"orders\" already exists") && err.contains("queue update"),
        "{err}"
    );
    let c = json(u, &["queue", "show", "orders"]);
    assert_eq!(c["config"]["max_receive_count"], 3, "left unchanged");

    let (_, err) = ok(
        u,
        &[
            "queue",
            "create",
            "orders",
            "--max-receive-count",
            "9",
            "--update",
        ],
    );
    assert!(err.contains("already existed"), "{err}");
    let c = json(u, &["queue", "show", "orders"]);
    assert_eq!(c["config"]["max_receive_count"], 9);
    // --update also creates.
    let (_, err) = ok(u, &["queue", "create", "fresh", "--update"]);
    assert!(err.contains("created queue fresh"), "{err}");
}

#[test]
fn message_show_tells_a_dead_letter() {
    let b = broker();
    let u = b.url.as_str();
    ok(
        u,
        &["queue", "create", "payments", "--max-receive-count", "1"],
    );
    let (id, _) = ok(u, &["send", "payments", "x"]);
    let id = id.trim();
    let (shown, _) = ok(u, &["message", "show", id]);
    assert!(
        shown.contains("visible") && !shown.contains("dead_lettered"),
        "{shown}"
    );
    let got = json(u, &["receive", "payments"]);
    let receipt = got["messages"][0]["receipt"].as_str().expect("receipt");
    ok(u, &["nack", "payments", receipt, "--error", "503"]);

    let (shown, _) = ok(u, &["message", "show", id]);
    let state = shown
        .lines()
        .find(|l| l.starts_with("state"))
        .unwrap_or_default();
    assert!(
        state.contains("dead_lettered (exhausted, in payments.dlq)"),
        "{shown}"
    );
    let v = json(u, &["message", "show", id]);
    assert_eq!(v["dead_lettered"], true);
    assert_eq!(v["state"], "visible");
}
