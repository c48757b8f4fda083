//! The OpenAPI document against the broker that serves it, checked by Schemathesis (a
//! property-based API tester): for two minutes it generates requests from `/openapi.json`,
//! valid and invalid, sends them to a real broker with an admin key, and checks every answer
//! against the document — no server errors, valid input accepted, invalid input refused,
//! answers, statuses, headers and content types as documented. One failure fails the test.
//!
//! Schemathesis comes from the Python venv (`python/.venv`, extra `api`, installed by
//! `.ci/run`) or `$SLUICE_SCHEMATHESIS`. Without it the test skips with a loud message on a
//! developer's machine and fails when `CI=true`.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The admin key of the broker under test.
const KEY: &str = "sk_schemathesis_0123456789abcdef0123456789";

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis")
}

fn schemathesis() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/.venv/bin/schemathesis");
    venv.exists().then_some(venv)
}

/// The SHA-256 of `KEY`, as `sluice key hash` prints it.
fn key_hash() -> String {
    let mut child = common::sluice()
        .args(["key", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sluice key hash");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(KEY.as_bytes())
        .expect("write the key");
    let out = child.wait_with_output().expect("sluice key hash");
    assert!(out.status.success(), "sluice key hash failed");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .split_whitespace()
        .last()
        .expect("a hash")
        .to_owned()
}

#[test]
fn the_document_matches_the_broker() {
    let Some(tester) = schemathesis() else {
        common::skip_or_fail(
            "the OpenAPI test needs Schemathesis: install it with \
             python3 -m pip install -e 'python[api]' into python/.venv (as .ci/run does), or \
             set SLUICE_SCHEMATHESIS to its executable",
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[[keys]]\nname = \"tester\"\nrole = \"admin\"\nqueues = [\"*\"]\nsha256 = \"{}\"\n",
            key_hash()
        ),
    )
    .expect("write the config");
    let data = dir.path().join("data");
    // Push may call any address, as the document's URL pattern allows: which addresses a
    // broker calls is its operator's setting, not the request's shape.
    let (_broker, url, _) = common::serve_with_frames(
        &data,
        Stdio::null(),
        &[
            "--config",
            config.to_str().expect("UTF-8 path"),
            "--push-allow",
            "0.0.0.0/0,::/0",
        ],
    );
    // Run from the temp dir: Schemathesis keeps a cache where it runs.
    let out = Command::new(&tester)
        .current_dir(dir.path())
        .env("SCHEMATHESIS_HOOKS", "hooks")
        .env("PYTHONPATH", here())
        .env("NO_COLOR", "1")
        .args([
            "--config-file",
            here()
                .join("schemathesis.toml")
                .to_str()
                .expect("UTF-8 path"),
            "run",
            &format!("{url}/openapi.json"),
            "--checks",
            "all",
            "--seed",
            "20261203",
            // Bounded so the whole suite stays within its CI budget; longer runs find more.
            "--max-time",
            "60",
            "--workers",
            "2",
            "--header",
            &format!("Authorization: Bearer {KEY}"),
        ])
        .output()
        .expect("run schemathesis");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Schemathesis found failures:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit 0 also when nothing ran; the run must have tested every operation.
    assert!(
        !report.contains("Empty test suite") && !report.contains("No checks ran"),
        "{report}"
    );
}
