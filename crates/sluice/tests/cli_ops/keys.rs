//! `sluice keys QUEUE`: each key's backlog, in flight, oldest age, deliveries, weight and
//! limits, most waiting first, page by page; `--json` is the server's answer.

use super::*;

#[test]
fn keys_lists_each_tenant_with_its_weight_and_limit() {
    let b = broker();
    let u = b.url.as_str();
    ok(
        u,
        &[
            "queue",
            "create",
            "tenants",
            "--key-weight",
            "vip-*=5",
            "--key-max-in-flight",
            "2",
            "--key-rate",
            "100/min",
        ],
    );
    for i in 0..4 {
        ok(
            u,
            &[
                "send",
                "tenants",
                &format!("{{\"n\": {i}}}"),
                "--key",
                "acme",
            ],
        );
    }
    ok(u, &["send", "tenants", "{\"n\": 9}", "--key", "vip-globex"]);
    ok(u, &["send", "tenants", "{\"n\": 10}"]);
    // Two of acme's and one of the others' in flight (acme is held at its limit of 2).
    assert_eq!(receipts(u, "tenants", 10).len(), 4);

    let out = ok(u, &["keys", "tenants"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{out}");
    assert!(lines[1].starts_with("acme "), "most waiting first: {out}");
    let acme: Vec<&str> = lines[1].split_whitespace().collect();
    // KEY BACKLOG VISIBLE IN-FLIGHT OLDEST DELIVERED/MIN WEIGHT MAX-IN-FLIGHT RATE
    assert_eq!(acme[1..4], ["2", "2", "2"], "{out}");
    assert_eq!(acme[acme.len() - 3..], ["1", "2", "100/min"], "{out}");
    assert!(out.contains("(no key)"), "{out}");
    let vip = lines
        .iter()
        .find(|l| l.starts_with("vip-globex"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(vip.split_whitespace().any(|c| c == "5"), "weight 5: {vip}");

    let page = json(u, &["keys", "tenants", "--limit", "1"]);
    assert_eq!(page["keys"][0]["key"], "acme");
    assert_eq!(page["keys"][0]["delivered_1m"], 2);
    assert_eq!(page["active_keys"], 2);
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, err) = ok2(u, &["keys", "tenants", "--limit", "1"]);
    assert!(err.contains(&format!("--cursor {cursor}")), "{err}");
    let rest = json(
        u,
        &["keys", "tenants", "--order", "in_flight", "--limit", "10"],
    );
    let names: Vec<&Value> = rest["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| &k["key"])
        .collect();
    assert_eq!(names[0], "acme", "most in flight first: {rest}");
    assert_eq!(names.len(), 3, "{rest}");

    let err = fails(u, &["keys", "nope"], 3);
    assert!(err.contains("nope"), "{err}");
}

/// `schedule put --key --priority`: every message the schedule enqueues carries them.
#[test]
fn a_schedule_gives_its_messages_a_key_and_a_priority() {
    let b = broker();
    let u = b.url.as_str();
    ok(u, &["queue", "create", "sweeps"]);
    let v = json(
        u,
        &[
            "schedule",
            "put",
            "acme-sync",
            "--queue",
            "sweeps",
            "--every",
            "15m",
            "--key",
            "acme",
            "--priority",
            "6",
        ],
    );
    assert_eq!(
        (&v["key"], &v["priority"]),
        (&"acme".into(), &6.into()),
        "{v}"
    );
    let shown = ok(u, &["schedule", "show", "acme-sync"]);
    assert!(shown.contains("acme"), "{shown}");
    fails(
        u,
        &[
            "schedule",
            "put",
            "x",
            "--queue",
            "sweeps",
            "--every",
            "1m",
            "--priority",
            "10",
        ],
        2,
    );
    ok(u, &["schedule", "delete", "acme-sync"]);
    ok(
        u,
        &[
            "schedule",
            "put",
            "acme-now",
            "--queue",
            "sweeps",
            "--every",
            "1h",
            "--key",
            "acme",
            "--priority",
            "6",
        ],
    );
    ok(u, &["schedule", "trigger", "acme-now"]);
    let got = json(u, &["receive", "sweeps"]);
    assert_eq!(
        (&got["messages"][0]["key"], &got["messages"][0]["priority"]),
        (&"acme".into(), &6.into()),
        "{got}"
    );
}
