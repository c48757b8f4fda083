//! The harness shared by the binary's tests: the real `sluice serve` on an ephemeral loopback
//! port, over a data directory of the test's choosing.
#![allow(dead_code)]

pub mod ca;
pub mod pg;
pub mod soak;
pub mod upstream;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A test that cannot run here for want of `msg`'s tool: skipped with a loud message on a
/// developer's machine, failed under `CI=true`.
pub fn skip_or_fail(msg: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    // Straight to stderr: the test harness captures `eprintln!` of passing tests.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "\n==================== SKIPPED ====================\n{msg}\n\
             =================================================\n\n"
        )
        .as_bytes(),
    );
}

/// The built `sluice` binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// The `sluice` binary as a command, with every `SLUICE_*` setting of the developer's shell
/// cleared (so it cannot change the test) and logs at `warn`.
pub fn sluice() -> Command {
    let mut c = Command::new(BIN);
    for var in [
        "SLUICE_CONFIG",
        "SLUICE_LISTEN",
        "SLUICE_DATA_DIR",
        "SLUICE_STORE",
        "SLUICE_NODE_ID",
        "SLUICE_FRAMES_LISTEN",
        "SLUICE_SQS_LISTEN",
        "SLUICE_SYNC_INTERVAL",
        "SLUICE_PUSH_ALLOW_HTTP",
        "SLUICE_PUSH_ALLOW",
        "SLUICE_TLS_CERT",
        "SLUICE_TLS_KEY",
        "SLUICE_TLS_CLIENT_CA",
        "SLUICE_ALLOW_PLAINTEXT",
        "SLUICE_CA_CERT",
        "SLUICE_CLIENT_CERT",
        "SLUICE_CLIENT_KEY",
        "SLUICE_URL",
        "SLUICE_TOKEN",
    ] {
        c.env_remove(var);
    }
    c.env("RUST_LOG", "warn");
    c
}

/// Starts `sluice serve --listen 127.0.0.1:0` over `data`, its log going to `stderr`, and
/// returns the child with the base URL it printed. Environment settings of the developer's
/// shell are cleared so they cannot change the test.
pub fn serve(data: &Path, stderr: Stdio) -> (Served, String) {
    let (child, url, _) = spawn(&[OsStr::new("--data-dir"), data.as_os_str()], stderr);
    (child, url)
}

/// As [`serve`], with `extra` flags (e.g. `--push-allow 127.0.0.1` for a test that pushes
/// to an endpoint of its own).
pub fn serve_and(data: &Path, stderr: Stdio, extra: &[&str]) -> (Served, String) {
    let mut args = vec![OsStr::new("--data-dir"), data.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    let (child, url, _) = spawn(&args, stderr);
    (child, url)
}

/// As [`serve`], with the frame protocol on another ephemeral port too (`--frames-listen`)
/// and `extra` flags: returns the child, the base URL and the frame listener's address.
pub fn serve_with_frames(data: &Path, stderr: Stdio, extra: &[&str]) -> (Served, String, String) {
    let mut args = vec![
        OsStr::new("--data-dir"),
        data.as_os_str(),
        OsStr::new("--frames-listen"),
        OsStr::new("127.0.0.1:0"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let (child, url, frames) = spawn(&args, stderr);
    (child, url, frames.expect("the frame listener's line"))
}

/// Starts `sluice serve --listen 127.0.0.1:0 --store <store>` (a PostgreSQL connection string)
/// and returns the child with the base URL it printed.
pub fn serve_store(store: &str, stderr: Stdio) -> (Served, String) {
    let (child, url, _) = spawn(&[OsStr::new("--store"), OsStr::new(store)], stderr);
    (child, url)
}

/// As [`serve_store`], with `extra` flags.
pub fn serve_store_and(store: &str, stderr: Stdio, extra: &[&str]) -> (Served, String) {
    let mut args = vec![OsStr::new("--store"), OsStr::new(store)];
    args.extend(extra.iter().map(OsStr::new));
    let (child, url, _) = spawn(&args, stderr);
    (child, url)
}

/// As [`serve`], with the SQS API on another ephemeral loopback port too (`--sqs-listen`):
/// returns the child, the base URL and the SQS endpoint's URL.
pub fn serve_with_sqs(data: &Path, stderr: Stdio) -> (Served, String, String) {
    serve_with_sqs_and(data, stderr, &[])
}

/// As [`serve_with_sqs`], with `extra` flags.
pub fn serve_with_sqs_and(data: &Path, stderr: Stdio, extra: &[&str]) -> (Served, String, String) {
    let mut args = vec![
        OsStr::new("--data-dir"),
        data.as_os_str(),
        OsStr::new("--sqs-listen"),
        OsStr::new("127.0.0.1:0"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let (child, url, side) = spawn_all(&args, stderr);
    (child, url, side.sqs.expect("the SQS listener's line"))
}

/// The side listeners a broker printed before its HTTP line.
#[derive(Default)]
struct Side {
    frames: Option<String>,
    sqs: Option<String>,
}

fn spawn(store_args: &[&OsStr], stderr: Stdio) -> (Served, String, Option<String>) {
    let (child, url, side) = spawn_all(store_args, stderr);
    (child, url, side.frames)
}

fn spawn_all(store_args: &[&OsStr], stderr: Stdio) -> (Served, String, Side) {
    let mut child = sluice()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(store_args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn sluice serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut side = Side::default();
    loop {
        let mut line = String::new();
        out.read_line(&mut line).expect("read the listening line");
        if let Some(addr) = line.trim().strip_prefix("sluice frames listening on ") {
            side.frames = Some(addr.to_owned());
            continue;
        }
        if let Some(url) = line.trim().strip_prefix("sluice sqs listening on ") {
            side.sqs = Some(url.to_owned());
            continue;
        }
        let url = line
            .trim()
            .strip_prefix("sluice listening on ")
            .unwrap_or_else(|| panic!("sluice serve did not start; line {line:?}"))
            .to_owned();
        return (Served(child), url, side);
    }
}

/// A `sluice serve` child that is killed when dropped, so a test that fails before it stops
/// its server leaves no broker running behind it.
pub struct Served(Child);

impl Served {
    /// Takes charge of a `sluice serve` child started by the test itself.
    pub fn new(child: Child) -> Served {
        Served(child)
    }
}

impl Deref for Served {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Served {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sluice serve` child over its own temporary data directory, killed on drop (before the
/// directory is removed: fields drop in order).
pub struct Broker {
    /// The server process.
    pub child: Served,
    /// Its base URL.
    pub url: String,
    _dir: tempfile::TempDir,
}

/// Starts a broker over a fresh temporary data directory.
pub fn broker() -> Broker {
    broker_and(&[])
}

/// As [`broker`], with `extra` flags.
pub fn broker_and(extra: &[&str]) -> Broker {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, url) = serve_and(&dir.path().join("data"), Stdio::null(), extra);
    Broker {
        child,
        url,
        _dir: dir,
    }
}

/// Calls `url` with `method` and an optional JSON body, asserts a 2xx answer and returns its
/// JSON (`Value::Null` for an empty one).
pub async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut req = c.request(method, &url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = resp.status();
    let text = resp.text().await.expect("answer");
    assert!(status.is_success(), "{url}: {status} {text}");
    if text.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text).expect("JSON")
    }
}
