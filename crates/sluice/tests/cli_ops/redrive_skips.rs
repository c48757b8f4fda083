//! What a redrive leaves behind, and why: the dry run, the job (`--detach`, `redrive show`)
//! and the audit say which dead letters stay and what to do about them.

use super::*;

/// Queue `name` (one delivery allowed) whose DLQ holds one dead letter per error given.
fn dead_lettered(url: &str, name: &str, errors: &[&str]) {
    ok(url, &["queue", "create", name, "--max-receive-count", "1"]);
    for i in 0..errors.len() {
        ok(url, &["send", name, &format!("{{\"n\": {i}}}")]);
    }
    for (r, e) in receipts(url, name, errors.len()).iter().zip(errors) {
        ok(url, &["reject", name, r, "--error", e]);
    }
    assert_eq!(visible(url, &format!("{name}.dlq")), errors.len() as u64);
}

#[test]
fn a_redrive_whose_queue_is_gone_says_so_in_the_dry_run_the_job_and_the_audit() {
    let b = broker();
    let u = b.url.as_str();
    dead_lettered(u, "s8", &["503"; 10]);
    ok(u, &["queue", "delete", "s8"]);

    let (out, err) = ok2(u, &["redrive", "s8.dlq", "--dry-run"]);
    assert!(
        out.contains("10 dead letters in s8.dlq match; 0 would move"),
        "{out}"
    );
    assert!(
        err.contains("10 would stay: their queue \"s8\" no longer exists"),
        "{err}"
    );
    let dry = json(u, &["redrive", "s8.dlq", "--dry-run"]);
    assert_eq!(
        (
            &dry["would_move"],
            &dry["skipped"],
            &dry["skips"]["missing_queues"]
        ),
        (
            &serde_json::json!(0),
            &serde_json::json!(10),
            &serde_json::json!(["s8"])
        ),
        "{dry}"
    );

    // Detached: the job ends without moving anything, and says why wherever it is read.
    let (out, _) = ok2(u, &["redrive", "s8.dlq", "--detach"]);
    let id = out.trim().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let job = loop {
        let job = json(u, &["redrive", "show", &id]);
        if job["state"] == "completed" || Instant::now() > deadline {
            break job;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(
        (&job["moved"], &job["skipped"]),
        (&serde_json::json!(0), &serde_json::json!(10))
    );
    let human = ok(u, &["redrive", "show", &id]);
    let reasons = human
        .lines()
        .find(|l| l.starts_with("skip_reasons"))
        .unwrap_or_else(|| panic!("no skip_reasons line: {human}"));
    assert!(
        reasons.contains("10 stayed: their queue \"s8\" no longer exists (create it again, or name a destination)"),
        "{reasons}"
    );
    let audit = json(u, &["audit", "--action", "redrive.finish"]);
    let finish = audit["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["details"]["job"] == id.as_str()))
        .unwrap_or_else(|| panic!("no redrive.finish of {id}: {audit}"));
    assert!(
        finish["details"]["skip_reasons"]
            .as_str()
            .is_some_and(|r| r.contains("\"s8\" no longer exists")),
        "{finish}"
    );
}

#[test]
fn a_limited_filtered_dry_run_counts_what_its_filter_and_limit_leave() {
    let b = broker();
    let u = b.url.as_str();
    let mut errors = vec!["503 unavailable"; 10];
    errors.extend(["400 bad input"; 2]);
    dead_lettered(u, "partner", &errors);
    let dry = json(
        u,
        &[
            "redrive",
            "partner",
            "--dry-run",
            "--limit",
            "4",
            "--filter-error",
            "503",
        ],
    );
    assert_eq!(
        (
            &dry["matched"],
            &dry["would_move"],
            &dry["skips"]["filtered"]
        ),
        (
            &serde_json::json!(10),
            &serde_json::json!(4),
            &serde_json::json!(2)
        ),
        "{dry}"
    );
    assert_eq!(
        dry["skip_reasons"],
        serde_json::json!([
            "2 would stay: the filter leaves them out",
            "6 would stay: beyond the limit of 4"
        ])
    );
    assert_eq!(visible(u, "partner.dlq"), 12, "a dry run moves nothing");
}
