//! The built `sluice` binary against a live `sluice serve`: `message show` tells a dead
//! letter for what it is.

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
