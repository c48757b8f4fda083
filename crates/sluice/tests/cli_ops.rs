//! The operator commands of the built `sluice` binary against a live
//! `sluice serve` on an ephemeral port: `dlq list` (and `--group-by`), `dlq summary`, `redrive` (dry
//! run, rate, detach, show, list, cancel), `stats` (all queues, one queue, `--json`,
//! `--chart`, `--watch`), `keys`, `audit`, `schedule`, and a governed queue's flags and breaker.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
#[path = "cli_ops/keys.rs"]
mod keys;
#[path = "cli_ops/redrive_skips.rs"]
mod redrive_skips;

use common::{BIN, broker};

fn command(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("SLUICE_URL", url)
        .env_remove("SLUICE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn sluice(url: &str, args: &[&str]) -> Output {
    command(url, args).output().expect("run sluice")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs, asserts exit code 0, returns (stdout, stderr).
fn ok2(url: &str, args: &[&str]) -> (String, String) {
    let out = sluice(url, args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed with {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    (text(&out.stdout), text(&out.stderr))
}

fn ok(url: &str, args: &[&str]) -> String {
    ok2(url, args).0
}

/// Runs, asserts exit code `code`, returns stderr.
fn fails(url: &str, args: &[&str], code: i32) -> String {
    let out = sluice(url, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "sluice {args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

fn json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ok(url, &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

fn visible(url: &str, queue: &str) -> u64 {
    json(url, &["stats", queue])["visible"]
        .as_u64()
        .expect("visible")
}

/// Receives up to `n` messages of `queue` and answers their receipts.
fn receipts(url: &str, queue: &str, n: usize) -> Vec<String> {
    let v = json(url, &["receive", queue, "--max", &n.to_string()]);
    v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["receipt"].as_str().expect("receipt").to_owned())
        .collect()
}

const DB_DOWN: &str = "connection refused: db:5432";
const HTTP_500: &str = "HTTP 500 from payments";

/// Queue `jobs` (one delivery allowed) with 10 dead letters in `jobs.dlq`: 6 rejected with
/// `DB_DOWN` (attribute `kind=email`), 4 nacked on their last attempt with `HTTP_500`
/// (`kind=charge`).
fn dead_letters(url: &str) {
    ok(
        url,
        &["queue", "create", "jobs", "--max-receive-count", "1"],
    );
    for i in 0..6 {
        ok(
            url,
            &[
                "send",
                "jobs",
                &format!("{{\"n\": {i}}}"),
                "--attr",
                "kind=email",
            ],
        );
    }
    for r in receipts(url, "jobs", 6) {
        ok(url, &["reject", "jobs", &r, "--error", DB_DOWN]);
    }
    for i in 6..10 {
        ok(
            url,
            &[
                "send",
                "jobs",
                &format!("{{\"n\": {i}}}"),
                "--attr",
                "kind=charge",
            ],
        );
    }
    for r in receipts(url, "jobs", 4) {
        ok(url, &["nack", "jobs", &r, "--error", HTTP_500]);
    }
    assert_eq!(visible(url, "jobs.dlq"), 10);
}

#[test]
fn dlq_list_shows_reasons_and_groups_errors() {
    let b = broker();
    let u = b.url.as_str();
    dead_letters(u);
    // One more whose lease runs out on its only allowed delivery.
    ok(u, &["send", "jobs", "\"slow\""]);
    ok(u, &["receive", "jobs", "--visibility", "1ms"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while visible(u, "jobs.dlq") < 11 {
        assert!(Instant::now() < deadline, "the lease never expired");
        // A receive looks for expired leases.
        ok(u, &["receive", "jobs", "--wait", "50ms"]);
    }

    // The source queue's name lists its DLQ, and says so.
    let (table, err) = ok2(u, &["dlq", "list", "jobs"]);
    assert!(err.contains("jobs.dlq"), "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 12, "header + 11 rows:\n{table}");
    for col in [
        "ID",
        "REASON",
        "LAST ERROR",
        "ATTEMPTS",
        "SOURCE",
        "DEAD-LETTERED",
    ] {
        assert!(lines[0].contains(col), "{table}");
    }
    let count = |needle: &str| table.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(count("rejected"), 6, "{table}");
    assert_eq!(count("exhausted"), 4, "{table}");
    assert_eq!(count("lease_expired"), 1, "{table}");
    assert_eq!(count(DB_DOWN), 6, "{table}");
    assert_eq!(
        count(" jobs "),
        11,
        "every row names its source queue:\n{table}"
    );

    // The DLQ's own name works the same.
    assert_eq!(ok(u, &["dlq", "list", "jobs.dlq"]).lines().count(), 12);

    // Grouped by error, largest group first: every dead letter counted by the broker.
    let grouped = ok(u, &["dlq", "list", "jobs", "--group-by", "error"]);
    let rows: Vec<&str> = grouped.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{grouped}");
    assert!(
        rows[0].starts_with(DB_DOWN) && rows[0].contains(" 6 "),
        "{grouped}"
    );
    assert!(
        rows[1].starts_with(HTTP_500) && rows[1].contains(" 4 "),
        "{grouped}"
    );
    assert!(
        rows[2].starts_with("(no error)") && rows[2].contains(" 1 "),
        "{grouped}"
    );
    let g = json(u, &["dlq", "list", "jobs", "--group-by", "error"]);
    assert_eq!(g["queue"], "jobs.dlq");
    assert_eq!(g["total"], 11);
    assert_eq!(g["groups"][0]["count"], 6);
    assert_eq!(g["groups"][0]["key"], DB_DOWN);
    assert_eq!(g["groups"][2]["key"], Value::Null);
    let by_reason = json(u, &["dlq", "summary", "jobs", "--group-by", "reason"]);
    let reasons: Vec<(&str, u64)> = by_reason["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["key"].as_str().unwrap_or("-"),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [("rejected", 6), ("exhausted", 4), ("lease_expired", 1)]
    );
    let by_kind = json(
        u,
        &[
            "dlq",
            "summary",
            "jobs",
            "--group-by",
            "attribute:kind",
            "--error",
            "db",
        ],
    );
    assert_eq!(by_kind["groups"][0]["key"], "email");
    assert_eq!(by_kind["total"], 6);

    // Filters and the limit.
    let f = ok(u, &["dlq", "list", "jobs", "--error", "HTTP 500"]);
    assert_eq!(f.lines().count(), 5, "{f}");
    let f = ok(
        u,
        &[
            "dlq",
            "list",
            "jobs",
            "--attr",
            "kind=email",
            "--since",
            "1h",
        ],
    );
    assert_eq!(f.lines().count(), 7, "{f}");
    let v = json(u, &["dlq", "list", "jobs", "--attr", "kind=charge"]);
    let msgs = v["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 4);
    assert!(msgs.iter().all(|m| m["dead_letter_reason"] == "exhausted"
        && m["last_error"] == HTTP_500
        && m["source_queue"] == "jobs"));
    let (f, err) = ok2(u, &["dlq", "list", "jobs", "--limit", "3"]);
    assert_eq!(f.lines().count(), 4, "{f}");
    assert!(err.contains("raise --limit"), "{err}");

    fails(u, &["dlq", "list", "nope"], 3);
    fails(u, &["dlq", "list", "jobs", "--group-by", "colour"], 2);
    fails(u, &["dlq", "list", "jobs", "--attr", "novalue"], 2);
}

#[test]
fn redrive_dry_run_rate_detach_cancel_and_audit() {
    let b = broker();
    let u = b.url.as_str();
    dead_letters(u);

    // A dry run counts and moves nothing.
    let out = ok(u, &["redrive", "jobs", "--dry-run"]);
    assert!(
        out.contains("dry run") && out.contains("10 dead letters"),
        "{out}"
    );
    let dry = json(
        u,
        &[
            "redrive",
            "jobs.dlq",
            "--dry-run",
            "--filter-error",
            "HTTP 500",
        ],
    );
    assert_eq!(dry["state"], "completed");
    assert_eq!(
        (dry["matched"].as_u64(), dry["moved"].as_u64()),
        (Some(4), Some(0))
    );
    let dry = json(
        u,
        &[
            "redrive",
            "jobs",
            "--dry-run",
            "--attr",
            "kind=email",
            "--after",
            "1h",
        ],
    );
    assert_eq!(dry["matched"], 6);
    let dry = json(u, &["redrive", "jobs", "--dry-run", "--before", "1h"]);
    assert_eq!(dry["matched"], 0);
    assert_eq!(visible(u, "jobs.dlq"), 10);
    assert_eq!(visible(u, "jobs"), 0);

    // Rates per minute or hour, below 1/s, are fine; nonsense is refused before anything
    // starts.
    let dry = json(u, &["redrive", "jobs", "--rate", "30/min", "--dry-run"]);
    assert_eq!(
        dry["rate"],
        serde_json::json!({"limit": 30, "period_ms": 60_000}),
        "{dry}"
    );
    assert_eq!(dry["matched"], 10);
    fails(u, &["redrive", "jobs", "--rate", "fast"], 2);
    fails(u, &["redrive", "jobs", "--rate", "0/min"], 2);
    fails(u, &["redrive", "jobs", "--pause-if-failing", "200%"], 2);

    // A rate-limited redrive of 4 finishes and they are back.
    let out = ok(u, &["redrive", "jobs", "--rate", "50/s", "--limit", "4"]);
    assert!(
        out.contains("completed") && out.contains("moved 4 of 4"),
        "{out}"
    );
    assert_eq!(visible(u, "jobs"), 4);
    assert_eq!(visible(u, "jobs.dlq"), 6);
    let s = json(u, &["stats", "jobs"]);
    assert_eq!(s["totals"]["redriven"], 4);

    // Detached: the id is printed and `show` finds the job.
    let (out, err) = ok2(u, &["redrive", "jobs", "--rate", "1/s", "--detach"]);
    let id = out.trim().to_owned();
    assert_eq!(id.len(), 16, "{out}");
    assert!(
        err.contains(&format!("sluice redrive cancel {id}")),
        "{err}"
    );
    let shown = json(u, &["redrive", "show", &id]);
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["source"], "jobs.dlq");
    assert_eq!(shown["rate_per_second"], 1);
    let human = ok(u, &["redrive", "show", &id]);
    assert!(
        human.contains("running") && human.contains("1/s"),
        "{human}"
    );
    let list = ok(u, &["redrive", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&id) && l.contains("running")),
        "{list}"
    );
    // Paused by hand and resumed.
    let out = ok(u, &["redrive", "pause", &id]);
    assert!(
        out.contains("paused") && out.contains(&format!("sluice redrive resume {id}")),
        "{out}"
    );
    let shown = json(u, &["redrive", "show", &id]);
    assert_eq!(shown["state"], "paused", "{shown}");
    assert!(
        shown["paused_reason"]
            .as_str()
            .is_some_and(|r| r.contains("paused by")),
        "{shown}"
    );
    let out = ok(u, &["redrive", "resume", &id]);
    assert!(out.contains("running"), "{out}");
    assert_eq!(
        json(u, &["redrive", "list"])["redrives"]
            .as_array()
            .map(Vec::len),
        Some(7),
        "six jobs and the dry run at 30/min"
    );

    // A second job of the same source is refused, naming the running one.
    let err = fails(u, &["redrive", "jobs", "--rate", "10/s"], 4);
    assert!(
        err.contains(&format!("sluice redrive cancel {id}")),
        "{err}"
    );

    // Cancel stops it; what moved stays moved.
    let out = ok(u, &["redrive", "cancel", &id]);
    assert!(out.contains("cancelled"), "{out}");
    let cancelled = json(u, &["redrive", "show", &id]);
    assert_eq!(cancelled["state"], "cancelled");
    let moved = cancelled["moved"].as_u64().expect("moved");
    assert!(moved < 6, "{cancelled}");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        visible(u, "jobs.dlq"),
        6 - moved,
        "nothing moves after the cancel"
    );
    fails(u, &["redrive", "show", "0123456789abcdef"], 3);
    fails(u, &["redrive", "show", "xyz"], 7);

    // The rest, watched to the end.
    let out = ok(
        u,
        &[
            "redrive",
            "jobs.dlq",
            "--rate",
            "100/s",
            "--keep-receive-count",
        ],
    );
    assert!(out.contains("completed"), "{out}");
    assert_eq!(visible(u, "jobs.dlq"), 0);
    assert_eq!(visible(u, "jobs"), 10);

    // The audit log holds the operator actions of this test.
    let audit = ok(u, &["audit"]);
    assert!(
        audit.lines().next().is_some_and(|h| h.contains("ACTOR")),
        "{audit}"
    );
    for action in [
        "queue.create",
        "redrive.create",
        "redrive.cancel",
        "message.dead_lettered",
    ] {
        assert!(audit.contains(action), "{action}:\n{audit}");
    }
    let v = json(
        u,
        &[
            "audit", "--queue", "jobs.dlq", "--since", "1h", "--limit", "1000",
        ],
    );
    let entries = v["entries"].as_array().expect("entries");
    assert!(entries.iter().all(|e| e["queue"] == "jobs.dlq"), "{v}");
    let creates = entries
        .iter()
        .filter(|e| e["action"] == "redrive.create")
        .count();
    assert_eq!(creates, 8, "5 dry runs, 3 runs: {v}");
    for action in [
        "redrive.pause",
        "redrive.resume",
        "redrive.finish",
        "redrive.progress",
    ] {
        assert!(
            entries.iter().any(|e| e["action"] == action),
            "{action}: {v}"
        );
    }
    assert!(
        entries
            .iter()
            .any(|e| e["action"] == "redrive.cancel" && e["details"]["job"] == id.as_str()),
        "{v}"
    );
    let limited = json(u, &["audit", "--limit", "2"]);
    assert_eq!(limited["entries"].as_array().map(Vec::len), Some(2));
    fails(u, &["audit", "--since", "last tuesday"], 2);
    // What people did, apart from what the broker recorded itself.
    let operator = json(u, &["audit", "--operator", "--limit", "1000"]);
    let entries = operator["entries"].as_array().expect("entries");
    assert!(
        !entries.is_empty() && entries.iter().all(|e| e["actor"] != "sluice"),
        "{operator}"
    );
    assert!(entries.iter().any(|e| e["action"] == "redrive.cancel"));
    let some = json(
        u,
        &[
            "audit",
            "--action",
            "redrive.pause,redrive.resume",
            "--action",
            "queue.create",
        ],
    );
    let actions: std::collections::BTreeSet<_> = some["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        ["queue.create", "redrive.pause", "redrive.resume"].into(),
        "{some}"
    );
    let lifecycle = json(u, &["audit", "--kind", "message", "--actor", "sluice"]);
    assert!(
        lifecycle["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .all(|e| e["action"] == "message.dead_lettered"),
        "{lifecycle}"
    );
    fails(u, &["audit", "--kind", "people"], 2);
    fails(u, &["audit", "--operator", "--kind", "broker"], 2);
}

#[test]
fn stats_tables_json_chart_and_watch() {
    let b = broker();
    let u = b.url.as_str();
    ok(u, &["queue", "create", "work"]);
    for i in 0..3 {
        ok(u, &["send", "work", &format!("{{\"n\": {i}}}")]);
    }

    // Every queue, one row each.
    let table = ok(u, &["stats"]);
    let header = table.lines().next().expect("header");
    for col in [
        "QUEUE",
        "VISIBLE",
        "DLQ",
        "OLDEST",
        "SENT/S",
        "ACKED/S",
        "TREND",
        "DLQ TREND",
        "ETA",
    ] {
        assert!(header.contains(col), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with("work "))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "3", "{table}");
    assert!(table.lines().any(|l| l.starts_with("work.dlq ")), "{table}");
    assert!(["↑", "↓", "→"].iter().any(|a| row.contains(a)), "{row}");
    let all = json(u, &["stats"]);
    let queues = all["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[0]["queue"], "work");
    assert_eq!(queues[0]["visible"], 3);

    // One queue: every field, trend included.
    let one = ok(u, &["stats", "work"]);
    for field in [
        "visible",
        "dead_letter_depth",
        "sent",
        "rates (1m)",
        "rates (15m)",
        "backlog trend",
        "drain_eta",
        "dlq trend",
        "dlq_empty_eta",
    ] {
        assert!(one.contains(field), "{field}: {one}");
    }
    let v = json(u, &["stats", "work"]);
    assert_eq!(v["visible"], 3);
    assert!(v["backlog_slope_per_sec"].is_number(), "{v}");
    assert!(v["rates"]["sent"].is_number(), "{v}");
    // Three sends into a new queue count at once, over the queue's age (at least a second).
    let sent = v["rates"]["sent"].as_f64().expect("rate");
    assert!(sent > 0.0 && sent <= 3.0, "{v}");
    assert_eq!(v["backlog_trend"]["change_1m"], 3, "{v}");
    // (The direction depends on when the broker last sampled; the server tests pin it down.)
    assert!(v["backlog_trend"]["direction"].is_string(), "{v}");

    // The chart: the broker samples every 10 s, so a fresh queue may have no history yet;
    // either way the command succeeds, and with history it shows the queue's numbers.
    let chart = ok(u, &["stats", "work", "--chart", "--window", "10m"]);
    assert!(chart.starts_with("work: last 10m"), "{chart}");
    let h = json(u, &["stats", "work", "--chart"]);
    assert_eq!(h["queue"], "work");
    if h["samples"].as_array().is_some_and(|s| !s.is_empty()) {
        assert!(
            chart.contains("backlog (visible + delayed + in flight): now"),
            "{chart}"
        );
        assert!(chart.contains("DLQ depth: now 0"), "{chart}");
        assert!(chart.contains('┤') && chart.contains('└'), "{chart}");
    } else {
        assert!(chart.contains("no history yet"), "{chart}");
    }
    fails(u, &["stats", "--chart"], 2);
    fails(u, &["stats", "missing"], 3);

    // --watch redraws until stopped.
    let seen = watch_frames(u, &["stats", "--watch", "--interval", "200ms"]);
    assert!(seen.matches("QUEUE ").count() >= 3, "{seen}");
    assert!(seen.lines().any(|l| l.starts_with("work ")), "{seen}");

    // --watch --chart redraws the chart.
    let seen = watch_frames(
        u,
        &["stats", "work", "--chart", "--watch", "--interval", "200ms"],
    );
    assert!(seen.matches("work: last 1h").count() >= 3, "{seen}");
}

/// Runs a `--watch` command until it drew three frames (or 10 s passed) and returns its output.
fn watch_frames(u: &str, args: &[&str]) -> String {
    let mut child = command(u, args).spawn().expect("spawn --watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut r = stdout;
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.matches("Ctrl-C to stop").count() < 3 && Instant::now() < deadline {
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push_str(&text(&chunk));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.matches("Ctrl-C to stop").count() >= 3, "{seen}");
    seen
}

#[test]
fn schedule_put_list_show_trigger_pause_and_delete() {
    let b = broker();
    let u = &b.url;
    ok(u, &["queue", "create", "sweeps"]);
    let out = ok(
        u,
        &[
            "schedule",
            "put",
            "nightly",
            "--queue",
            "sweeps",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--body",
            r#"{"task": "expire"}"#,
            "--catch-up",
            "one",
        ],
    );
    assert!(out.contains("cron 30 2 * * * (Europe/Berlin)"), "{out}");
    assert!(out.contains("catch up") && out.contains("one"), "{out}");
    let list = ok(u, &["schedule", "list"]);
    assert!(
        list.contains("nightly") && list.contains("active"),
        "{list}"
    );
    let v = json(u, &["schedule", "show", "nightly"]);
    assert_eq!(v["next"].as_array().map(Vec::len), Some(5), "{v}");
    let sent = ok(u, &["schedule", "trigger", "nightly"]);
    assert!(sent.starts_with("sent "), "{sent}");
    assert_eq!(visible(u, "sweeps"), 1);
    let paused = ok(u, &["schedule", "pause", "nightly"]);
    assert!(
        paused.contains("paused") && paused.contains("true"),
        "{paused}"
    );
    let err = fails(
        u,
        &[
            "schedule", "put", "bad", "--queue", "sweeps", "--cron", "often",
        ],
        7,
    );
    assert!(err.contains("*/5 * * * *"), "{err}");
    let err = fails(
        u,
        &[
            "schedule", "put", "x", "--queue", "sweeps", "--every", "1m", "--body", "sweep",
        ],
        2,
    );
    assert!(err.contains("--body must be JSON"), "{err}");
    ok(u, &["schedule", "delete", "nightly"]);
    fails(u, &["schedule", "show", "nightly"], 3);
}

/// `queue create|update --adaptive/--breaker` (and `--no-…`), `queue breaker Q open|close`,
/// and a governed queue's rate and breaker in `stats Q`; bad settings say how to write them.
#[test]
fn governance_flags_force_the_breaker_and_show_it_in_stats() {
    let b = broker();
    let u = b.url.as_str();
    ok(
        u,
        &[
            "queue",
            "create",
            "calls",
            "--adaptive",
            "min=60,max=6000,signal=errors:429;503,window=30s",
            "--breaker",
            "share=0.25,min_calls=10,probe_every=10s",
        ],
    );
    let shown = ok(u, &["queue", "show", "calls"]);
    assert!(
        shown.contains("min=60,max=6000,signal=errors:429;503,window=30s"),
        "{shown}"
    );
    assert!(
        shown.contains("share=0.25,window=1m,min_calls=10,probe_every=10s,probes=3"),
        "{shown}"
    );
    let q = json(u, &["queue", "show", "calls"]);
    assert_eq!(q["config"]["adaptive"]["signal"]["errors"][1], "503", "{q}");
    assert_eq!(q["config"]["breaker"]["failure_share"], 0.25, "{q}");

    let stats = ok(u, &["stats", "calls"]);
    assert!(stats.contains("adaptive rate"), "{stats}");
    assert!(stats.contains("60/min (bounds 60 – 6000)"), "{stats}");
    assert!(stats.contains("closed since"), "{stats}");

    let forced = ok(u, &["queue", "breaker", "calls", "open"]);
    assert!(forced.contains("open (forced) since"), "{forced}");
    assert!(forced.contains("closed → open (forced)"), "{forced}");
    let stats = ok(u, &["stats", "calls"]);
    assert!(stats.contains("open (forced) since"), "{stats}");
    assert!(stats.contains("opened 1 time,"), "{stats}");
    let v = json(u, &["stats", "calls"]);
    assert_eq!(v["flow"]["breaker"]["state"], "open", "{v}");
    let v = json(u, &["queue", "breaker", "calls", "close"]);
    assert_eq!(
        (&v["breaker"]["state"], &v["breaker"]["forced"]),
        (&Value::from("closed"), &Value::from(false)),
        "{v}"
    );

    // A bare --breaker takes the defaults; --no-… removes each.
    ok(
        u,
        &["queue", "update", "calls", "--no-adaptive", "--breaker"],
    );
    let q = json(u, &["queue", "show", "calls"]);
    assert!(q["config"].get("adaptive").is_none(), "{q}");
    assert_eq!(q["config"]["breaker"]["min_calls"], 20, "{q}");
    ok(u, &["queue", "update", "calls", "--no-breaker"]);
    let v = json(u, &["stats", "calls"]);
    assert!(v.get("flow").is_none(), "not governed any more: {v}");
    let err = fails(u, &["queue", "breaker", "calls", "open"], 4);
    assert!(err.contains("has no breaker"), "{err}");

    for (args, says) in [
        (&["--adaptive", "max=600"][..], "needs min and max"),
        (
            &["--adaptive", "min=60,max=600,pace=3"],
            "no setting \"pace\"",
        ),
        (&["--adaptive", "min=600,max=60"], "min_per_min must be"),
        (
            &["--adaptive", "min=1,max=9,signal=429"],
            "'signal=errors:429;503'",
        ),
        (&["--breaker", "share=2"], "write it like share=0.5"),
        (&["--breaker", "probes=0"], "probes must be 1 to 100"),
        (&["--breaker", "--no-breaker"], "cannot be used with"),
    ] {
        let mut all = vec!["queue", "update", "calls"];
        all.extend_from_slice(args);
        let err = fails(u, &all, 2);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let err = fails(u, &["queue", "breaker", "calls", "ajar"], 2);
    assert!(err.contains("open") && err.contains("close"), "{err}");
}
