//! The built `sluice` binary: serve on an ephemeral port, answer, stop cleanly on SIGTERM;
//! refuse a public address without keys; the key helpers.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::sluice;

/// Runs `sluice serve --listen 127.0.0.1:0` with `args`, which must refuse to start, and
/// returns what it printed on stderr.
fn serve_fails(args: &[&str]) -> String {
    let out = sluice()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("run sluice");
    assert!(!out.status.success(), "sluice serve started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A temporary path as text (they are UTF-8 here).
fn utf8(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// Starts `sluice serve` and returns it with the base URL it printed.
fn serve(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sluice");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let url = line
        .trim()
        .strip_prefix("sluice listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, url)
}

fn terminate(mut child: Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not stop within 10 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_on_an_ephemeral_port_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (child, url) = serve(
        sluice()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data),
    );
    let client = reqwest::Client::new();
    let resp = client.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let resp = client
        .put(format!("{url}/v1/queues/jobs"))
        .json(&config_patch())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let resp = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let status = tokio::task::spawn_blocking(move || terminate(child))
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(data.join("queues.json").exists());
}

fn config_patch() -> std::collections::BTreeMap<String, u32> {
    std::collections::BTreeMap::from([("max_receive_count".to_owned(), 2)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_declares_queues_and_keys_and_env_vars_apply() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "sluice_test_secret";
    let config = dir.path().join("sluice.toml");
    let hash = hash_of(secret);
    std::fs::write(
        &config,
        format!(
            r#"
listen = "127.0.0.1:1"   # overridden by SLUICE_LISTEN
[[queues]]
name = "orders"
max_receive_count = 3
rate_limit = {{ limit = 10, period_ms = 1000 }}

[[keys]]
name = "ops"
role = "operator"
queues = ["orders", "orders.*"]
sha256 = "{hash}"
"#
        ),
    )
    .unwrap();
    let (child, url) = serve(
        sluice()
            .args(["serve"])
            .env("SLUICE_CONFIG", &config)
            .env("SLUICE_LISTEN", "127.0.0.1:0")
            .env("SLUICE_DATA_DIR", dir.path().join("data")),
    );
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("{url}/v1/queues/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client
        .get(format!("{url}/v1/queues/orders"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains(r#""max_receive_count":3"#), "{body}");
    assert!(
        body.contains(r#""rate_limit":{"limit":10,"period_ms":1000}"#),
        "{body}"
    );
    let status = tokio::task::spawn_blocking(move || terminate(child))
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_public_address_without_keys_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let refused = |listen: &[&str]| {
        let out = sluice()
            .arg("serve")
            .args(listen)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .expect("run sluice");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            stderr.contains("refusing to listen on 0.0.0.0:0"),
            "{stderr}"
        );
        assert!(stderr.contains("[[keys]]"), "{stderr}");
        assert!(!Path::new(&data).exists(), "the store must not be opened");
    };
    refused(&["--listen", "0.0.0.0:0"]);
    // The frame listener is held to the same rule.
    refused(&["--listen", "127.0.0.1:0", "--frames-listen", "0.0.0.0:0"]);
}

#[test]
fn a_bad_config_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[queues]]\nname = \"q\"\nvisiblity_timeout_ms = 5\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let stderr = serve_fails(&["--config", utf8(&config), "--data-dir", utf8(&data)]);
    assert!(stderr.contains("visiblity_timeout_ms"), "{stderr}");
}

fn hash_of(secret: &str) -> String {
    let mut child = sluice()
        .args(["key", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{secret}\n").as_bytes())
        .expect("write the secret");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

#[test]
fn key_hash_and_generate() {
    // SHA-256 of "secret".
    assert_eq!(
        hash_of("secret"),
        "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    );
    let out = sluice().args(["key", "generate"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let secret = text
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .unwrap();
    let hash = text
        .lines()
        .find_map(|l| l.strip_prefix("sha256: "))
        .unwrap();
    assert!(secret.starts_with("sluice_") && secret.len() == 7 + 64);
    assert_eq!(hash_of(secret), hash);
    let empty = sluice()
        .args(["key", "hash"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!empty.status.success());
}

/// A `--store` that is neither `embedded` nor a PostgreSQL connection string, a bad schema
/// name and an unreachable database each stop start-up with a message saying what to fix.
#[test]
fn a_bad_store_is_reported() {
    let run = |store: &str| serve_fails(&["--store", store]);
    let e = run("mysql://db/x");
    assert!(
        e.contains("neither `embedded` nor a postgres:// connection string"),
        "{e}"
    );
    let e = run("postgres://postgres@127.0.0.1:5432/test?schema=no-dashes");
    assert!(e.contains("letters, digits or underscores"), "{e}");
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let e = run("postgres://postgres:secret@127.0.0.1:1/test");
    assert!(e.contains("opening PostgreSQL store"), "{e}");
    assert!(e.contains("check that the server runs"), "{e}");
    assert!(!e.contains("secret"), "the password is not printed: {e}");
}

#[test]
fn a_bad_sync_interval_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |extra: &[&str]| serve_fails(&[&["--data-dir", utf8(&data)], extra].concat());
    let e = run(&["--sync-interval", "0ms"]);
    assert!(
        e.contains("--sync-interval must be between 1ms and 60 s"),
        "{e}"
    );
    let e = run(&["--sync-interval", "soon"]);
    assert!(e.contains("is not a duration"), "{e}");
    let e = run(&[
        "--sync-interval",
        "1s",
        "--store",
        "postgres://postgres@127.0.0.1:1/test",
    ]);
    assert!(e.contains("synchronous_commit = off"), "{e}");
    assert!(!Path::new(&data).exists(), "the store must not be opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_file_turns_on_frames_and_relaxed_durability() {
    use sluice_client::frames::{Body, FrameConnection, FrameMessage};

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\nframes_listen = \"127.0.0.1:0\"\nsync_interval = \"50ms\"\n\
         [[queues]]\nname = \"jobs\"\n",
    )
    .unwrap();
    let mut child = sluice()
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sluice");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let frames = line
        .trim()
        .strip_prefix("sluice frames listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let mut conn = FrameConnection::connect(frames.as_str(), None)
        .await
        .unwrap();
    conn.send(
        "jobs",
        vec![FrameMessage::new(Body::text("from the config"))],
    )
    .await
    .unwrap();
    let got = conn
        .receive("jobs", 1, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got[0].body, Body::text("from the config"));
    assert_eq!(terminate(child).code(), Some(0));

    // A bad interval in the file is named as the file's.
    std::fs::write(&config, "sync_interval = \"soon\"\n").unwrap();
    let data = dir.path().join("data");
    let stderr = serve_fails(&["--config", utf8(&config), "--data-dir", utf8(&data)]);
    assert!(
        stderr.contains("sync_interval in the config file"),
        "{stderr}"
    );
}
