//! The SQS-compatible endpoint (`sluice serve --sqs-listen`) with the clients teams already
//! run: boto3 and the AWS CLI, against the real broker, on the same queues as Sluice's own API
//! (`tests/sqs/boto3_suite.py`), over both of SQS's protocols: current boto3 speaks AWS JSON,
//! boto3 1.33 the query protocol (form parameters, XML answers); and a Celery worker on Kombu's
//! SQS transport (`tests/sqs/celery_suite.py`).
//!
//! The current clients come from the Python venv (`python/.venv`, extra `api`, installed by
//! `.ci/run`) or `$SLUICE_PYTHON`; the older ones from `python/.venv-sqs-query`
//! (`tests/sqs/query-requirements.txt`, also installed by `.ci/run`) or
//! `$SLUICE_PYTHON_SQS_QUERY`. Without them the tests skip with a loud message on a
//! developer's machine and fail when `CI=true`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The interpreter named by `$var`, else the one of the venv `python/<venv>`, else `python3`.
fn python_from(var: &str, venv: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python")
        .join(venv)
        .join("bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// The interpreter with current boto3 and the AWS CLI.
fn python() -> PathBuf {
    python_from("SLUICE_PYTHON", ".venv")
}

/// True when `python` has boto3, httpx and the AWS CLI; otherwise skips loudly (`install`
/// says how to get them), or fails on CI.
fn have_boto3(python: &Path, install: &str) -> bool {
    let ok = Command::new(python)
        .args(["-c", "import boto3, httpx, awscli"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    let msg = format!(
        "the SQS endpoint's test needs Python with boto3, httpx and the AWS CLI (awscli): {install}"
    );
    common::skip_or_fail(&msg);
    false
}

const INSTALL_CURRENT: &str = "install them with python3 -m pip install -e 'python[api]' into \
                               python/.venv (as .ci/run does), or set SLUICE_PYTHON to an \
                               interpreter that has them";
const INSTALL_QUERY: &str = "create python/.venv-sqs-query and install \
                             crates/sluice/tests/sqs/query-requirements.txt into it (as \
                             .ci/run does), or set SLUICE_PYTHON_SQS_QUERY to an interpreter \
                             that has them";

#[test]
fn boto3_works_against_the_sqs_endpoint() {
    let python = python();
    if !have_boto3(&python, INSTALL_CURRENT) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, url, sqs) = common::serve_with_sqs(&dir.path().join("data"), Stdio::null());
    run_suite(&python, "boto3_suite.py", "json", &sqs, &url);
}

#[test]
fn an_older_boto3_works_over_the_query_protocol() {
    let python = python_from("SLUICE_PYTHON_SQS_QUERY", ".venv-sqs-query");
    if !have_boto3(&python, INSTALL_QUERY) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, url, sqs) = common::serve_with_sqs(&dir.path().join("data"), Stdio::null());
    run_suite(&python, "boto3_suite.py", "query", &sqs, &url);
}

#[test]
fn celery_runs_tasks_through_the_sqs_endpoint() {
    let python = python();
    if !have_boto3(&python, INSTALL_CURRENT) {
        return;
    }
    let celery = Command::new(&python)
        .args(["-c", "import celery, kombu.transport.SQS, pycurl"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !celery {
        common::skip_or_fail(
            "the Celery test of the SQS endpoint needs celery[sqs] (Kombu's SQS transport and \
             pycurl): install python[api] into python/.venv, as .ci/run does",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, url, sqs) = common::serve_with_sqs(&dir.path().join("data"), Stdio::null());
    run_suite(&python, "celery_suite.py", "json", &sqs, &url);
}

#[test]
fn the_sqs_listener_serves_https_with_the_brokers_certificate() {
    let python = python();
    if !have_boto3(&python, INSTALL_CURRENT) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = common::ca::Ca::new(dir.path(), "ca");
    ca.sign("server", &["localhost", "127.0.0.1"]);
    let (cert, key) = (ca.path("server"), ca.path("server-key"));
    let public = "https://sqs.example.test:8443";
    let (_broker, url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &[
            "--tls-cert",
            cert.to_str().expect("UTF-8 path"),
            "--tls-key",
            key.to_str().expect("UTF-8 path"),
            "--sqs-public-url",
            &format!("{public}/"),
        ],
    );
    let sqs = sqs.replace("127.0.0.1", "localhost");
    run_suite_with(
        &python,
        "tls_suite.py",
        &[
            ("SQS_URL", sqs.as_str()),
            ("SLUICE_URL", url.as_str()),
            ("SQS_CA", ca.path("ca").to_str().expect("UTF-8 path")),
            ("SQS_PUBLIC_URL", public),
        ],
    );
}

#[test]
fn the_sqs_listener_goes_off_loopback_only_with_keys_and_tls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = common::ca::Ca::new(dir.path(), "ca");
    ca.sign("server", &["localhost"]);
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[[sqs_keys]]\naccess_key_id = \"AKIAOPS\"\nsecret_access_key = \"s3cret-0123456789\"\n\
         role = \"admin\"\n",
    )
    .expect("write the config");
    let check = |extra: &[&str]| {
        common::sluice()
            .args(["serve", "--check-config", "--sqs-listen", "0.0.0.0:9324"])
            .arg("--config")
            .arg(&config)
            .args(extra)
            .output()
            .expect("sluice serve --check-config")
    };
    let plain = check(&[]);
    assert!(!plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("--tls-cert"), "{err}");
    let tls = check(&[
        "--tls-cert",
        ca.path("server").to_str().expect("UTF-8 path"),
        "--tls-key",
        ca.path("server-key").to_str().expect("UTF-8 path"),
    ]);
    assert!(
        tls.status.success(),
        "{}",
        String::from_utf8_lossy(&tls.stderr)
    );
    let bad_url = check(&["--allow-plaintext", "--sqs-public-url", "sqs.example.com"]);
    assert!(!bad_url.status.success());
    let err = String::from_utf8_lossy(&bad_url.stderr);
    assert!(err.contains("--sqs-public-url"), "{err}");
}

/// Runs the Python suite `name` of `tests/sqs` with `python`, whose boto3 speaks `protocol`,
/// against the endpoint `sqs` (and the broker's own API at `url`); fails the test with its
/// output when it fails.
fn run_suite(python: &Path, name: &str, protocol: &str, sqs: &str, url: &str) {
    run_suite_with(
        python,
        name,
        &[
            ("SQS_PROTOCOL", protocol),
            ("SQS_URL", sqs),
            ("SLUICE_URL", url),
        ],
    );
}

/// Runs the Python suite `name` of `tests/sqs` with `python` and the environment `env`;
/// fails the test with its output when it fails.
fn run_suite_with(python: &Path, name: &str, env: &[(&str, &str)]) {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sqs")
        .join(name);
    let out = Command::new(python)
        .arg(&suite)
        .envs(env.iter().copied())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn signed_requests_are_checked_against_sqs_keys() {
    let python = python();
    if !have_boto3(&python, INSTALL_CURRENT) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        r#"
[[sqs_keys]]
access_key_id = "AKIAADMIN0000000"
secret_access_key = "admin-secret-0123456789"
role = "admin"

[[sqs_keys]]
access_key_id = "AKIAPRODUCER0000"
secret_access_key = "producer-secret-0123456789"
role = "producer"
queues = ["orders-*"]

[[sqs_keys]]
access_key_id = "AKIAOPERATOR0000"
secret_access_key = "operator-secret-0123456789"
role = "operator"
queues = ["team-*"]
"#,
    )
    .expect("write the config");
    let (_broker, url, sqs) = common::serve_with_sqs_and(
        &dir.path().join("data"),
        Stdio::null(),
        &["--config", config.to_str().expect("UTF-8 path")],
    );
    run_suite(&python, "signed_suite.py", "json", &sqs, &url);
    // Query requests are signed over their form body.
    let query = python_from("SLUICE_PYTHON_SQS_QUERY", ".venv-sqs-query");
    if have_boto3(&query, INSTALL_QUERY) {
        run_suite(&query, "signed_suite.py", "query", &sqs, &url);
    }
    // Secrets are never shown by --check-config.
    let shown = common::sluice()
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .output()
        .expect("sluice serve --check-config");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success() && text.contains("AKIAPRODUCER0000"),
        "{text}"
    );
    assert!(!text.contains("producer-secret"), "{text}");
}

#[test]
fn the_sqs_listener_stays_on_loopback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = common::sluice()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--sqs-listen",
            "0.0.0.0:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("run sluice serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback only"), "{err}");
}
