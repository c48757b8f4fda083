//! TLS on the real binary: HTTP and frames over TLS with a private CA, the CLI and the bench
//! trusting it with `--ca-cert`, a certificate reloaded on SIGHUP while an open connection
//! keeps working, client certificates (`--tls-client-ca`), and the rule that API keys never
//! cross the network in clear text.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ca::Ca;
use common::{Served, sluice};
use rustls::pki_types::{CertificateDer, ServerName};
use sluice_client::TlsOptions;
use sluice_client::frames::{Body, FrameConnection, FrameMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A key whose secret the tests send, and the config file that declares it.
const SECRET: &str = "sluice_tls_test_secret_0123456789";

fn config_with_key(dir: &Path) -> PathBuf {
    let mut hash = sluice()
        .args(["key", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sluice key hash");
    std::io::Write::write_all(&mut hash.stdin.take().expect("stdin"), SECRET.as_bytes())
        .expect("write the secret");
    let out = hash.wait_with_output().expect("sluice key hash");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sha = text(&out.stdout).trim().to_owned();
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!("[[keys]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"{sha}\"\n"),
    )
    .expect("write config");
    path
}

/// `sluice serve` on ephemeral loopback ports for HTTP and frames with `args`; returns the
/// child, its base URL, its frame address and its log lines as they come.
fn serve(dir: &Path, args: &[&str]) -> (Served, String, String, std::sync::mpsc::Receiver<String>) {
    let mut child = sluice()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--frames-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice serve");
    let (tx, log) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("frames line");
    let frames = line
        .trim()
        .strip_prefix("sluice frames listening on ")
        .unwrap_or_else(|| panic!("no frames line: {line:?}"))
        .to_owned();
    line.clear();
    out.read_line(&mut line).expect("listening line");
    let url = line
        .trim()
        .strip_prefix("sluice listening on ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();
    (Served::new(child), url, frames, log)
}

/// Waits for a log line containing `needle`.
fn wait_for_log(log: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if let Ok(line) = log.recv_timeout(left)
            && line.contains(needle)
        {
            return line;
        }
    }
    panic!("no log line with {needle:?} within 10 s");
}

/// The CLI against `url` with `args`.
fn cli(url: &str, args: &[&str]) -> Output {
    sluice()
        .args(args)
        .args(["--url", url, "--token", SECRET])
        .output()
        .expect("run the CLI")
}

/// A rustls client trusting `ca` (DER), presenting nothing.
fn raw_client(ca: &Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).expect("read CA");
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert.expect("CA PEM")).expect("add CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Opens a TLS connection to `addr` as `localhost`; returns it with the certificate the
/// broker presented.
async fn open(
    connector: &tokio_rustls::TlsConnector,
    addr: &str,
) -> (
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    CertificateDer<'static>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let stream = connector.connect(name, tcp).await.expect("handshake");
    let cert = stream.get_ref().1.peer_certificates().expect("peer certs")[0].clone();
    (stream, cert)
}

/// One HTTP/1.1 request on an open connection; returns the status line.
async fn http_get(
    stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    path: &str,
) -> String {
    let req =
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {SECRET}\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 16 * 1024];
    let n = stream.read(&mut buf).await.expect("read");
    let answer = text(&buf[..n]);
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_frames_over_tls_with_a_reload_on_sighup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new(dir.path(), "ca");
    let first = ca.sign("server", &["localhost", "127.0.0.1"]);
    let config = config_with_key(dir.path());
    let (cert, key) = (ca.path("server"), ca.path("server-key"));
    let (mut child, url, frames, log) = serve(
        dir.path(),
        &[
            "--config",
            config.to_str().expect("path"),
            "--tls-cert",
            cert.to_str().expect("path"),
            "--tls-key",
            key.to_str().expect("path"),
        ],
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let url = url.replace("127.0.0.1", "localhost");
    let ca_pem = ca.path("ca");

    // The CLI trusts the CA it is given, and only then.
    let out = cli(&url, &["queue", "create", "jobs"]);
    assert!(!out.status.success(), "an unknown CA was trusted");
    let err = text(&out.stderr);
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(err.contains("--ca-cert"), "the hint names the fix: {err}");
    let with_ca = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--ca-cert", ca_pem.to_str().expect("path")]);
        cli(&url, &all)
    };
    for args in [
        &["queue", "create", "jobs"][..],
        &["send", "jobs", "hello over tls"],
    ] {
        let out = with_ca(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    // SLUICE_CA_CERT does the same as --ca-cert.
    let out = sluice()
        .args(["receive", "jobs", "--ack", "--url", &url, "--token", SECRET])
        .env("SLUICE_CA_CERT", &ca_pem)
        .output()
        .expect("receive");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("hello over tls"),
        "{}",
        text(&out.stdout)
    );

    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(url.replace("https://", "http://") + "/healthz")
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");

    // Frames over TLS, with the same CA.
    let tls = TlsOptions::default().ca_cert_file(&ca_pem).expect("CA");
    let frames = frames.replace("127.0.0.1", "localhost");
    let mut conn = FrameConnection::connect_tls(&frames, &tls, Some(SECRET))
        .await
        .expect("frames over TLS");
    conn.send("jobs", vec![FrameMessage::new(Body::text("framed"))])
        .await
        .expect("send over frames");
    let got = conn
        .receive("jobs", 10, Duration::from_secs(2))
        .await
        .expect("receive over frames");
    assert_eq!(got.len(), 1);
    conn.ack("jobs", got.iter().map(|d| d.receipt).collect())
        .await
        .expect("ack over frames");
    // A frame client without the CA is refused at the handshake.
    let refused = FrameConnection::connect_tls(&frames, &TlsOptions::default(), Some(SECRET)).await;
    assert!(refused.is_err(), "frames trusted an unknown CA");

    // The bench over TLS, HTTP and frames.
    let out = sluice()
        .args([
            "bench", "--url", &url, "--token", SECRET, "--frames", &frames,
        ])
        .args(["--ca-cert", ca_pem.to_str().expect("path")])
        .args(["--queue", "bench-tls", "--messages", "500", "--batch", "50"])
        .args(["--producers", "1", "--consumers", "1", "--json"])
        .output()
        .expect("bench");
    assert!(
        out.status.success(),
        "bench over TLS: {}",
        text(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench JSON report");
    assert_eq!(report["sent"], 500, "{report:#}");
    assert_eq!(report["unacked_at_end"], 0, "{report:#}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report:#}");

    // SIGHUP: new connections get the new certificate; an open one keeps working.
    let connector = raw_client(&ca_pem);
    let http_addr = url.trim_start_matches("https://").to_owned();
    let (mut before, seen) = open(&connector, &http_addr).await;
    assert_eq!(seen, first);
    assert!(http_get(&mut before, "/healthz").await.contains("200"));
    let second = ca.sign("server", &["localhost", "127.0.0.1"]);
    assert_ne!(first, second);
    let pid = child.id().to_string();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    wait_for_log(&log, "reloaded");
    let (_, seen) = open(&connector, &http_addr).await;
    assert_eq!(
        seen, second,
        "a new connection gets the reloaded certificate"
    );
    let (_, seen) = open(&connector, &frames).await;
    assert_eq!(seen, second, "the frame listener too");
    assert!(
        http_get(&mut before, "/v1/queues/jobs")
            .await
            .contains("200"),
        "the connection opened before the reload still serves"
    );
    assert!(
        child.try_wait().expect("status").is_none(),
        "SIGHUP stopped the broker"
    );

    // A reload from a broken file keeps the certificate in use.
    std::fs::write(&key, "not a key").expect("break the key");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    let line = wait_for_log(&log, "TLS reload failed");
    assert!(
        line.contains("private key"),
        "the log names what is wrong: {line}"
    );
    let (_, seen) = open(&connector, &http_addr).await;
    assert_eq!(seen, second, "still the last good certificate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_with_tls_client_ca() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new(dir.path(), "ca");
    ca.sign("server", &["localhost"]);
    let clients = Ca::new(dir.path(), "clients");
    clients.sign("worker", &["worker.internal"]);
    // A certificate from another CA is not enough.
    let stranger = Ca::new(dir.path(), "stranger");
    stranger.sign("intruder", &["intruder.internal"]);
    let config = config_with_key(dir.path());
    let p = |f: &str| ca.path(f).to_str().expect("path").to_owned();
    let (_child, url, frames, _log) = serve(
        dir.path(),
        &[
            "--config",
            config.to_str().expect("path"),
            "--tls-cert",
            &p("server"),
            "--tls-key",
            &p("server-key"),
            "--tls-client-ca",
            &p("clients"),
        ],
    );
    let url = url.replace("127.0.0.1", "localhost");
    let base = ["--ca-cert".to_owned(), p("ca")];
    let run = |extra: &[String]| {
        let mut args: Vec<String> = ["queue", "list"].map(str::to_owned).to_vec();
        args.extend(base.iter().cloned());
        args.extend(extra.iter().cloned());
        cli(&url, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run(&[]);
    assert!(
        !out.status.success(),
        "served a client without a certificate"
    );
    let out = run(&[
        "--client-cert".into(),
        p("intruder"),
        "--client-key".into(),
        p("intruder-key"),
    ]);
    assert!(!out.status.success(), "served a certificate of another CA");
    let out = run(&[
        "--client-cert".into(),
        p("worker"),
        "--client-key".into(),
        p("worker-key"),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Frames ask for the certificate too.
    let frames = frames.replace("127.0.0.1", "localhost");
    let trust = TlsOptions::default().ca_cert_file(p("ca")).expect("CA");
    let without = async {
        let mut conn = FrameConnection::connect_tls(&frames, &trust, Some(SECRET)).await?;
        conn.receive("none", 1, Duration::ZERO).await
    };
    assert!(
        without.await.is_err(),
        "frames served a client without a certificate"
    );
    let with = trust
        .client_cert_files(p("worker"), p("worker-key"))
        .expect("client cert");
    FrameConnection::connect_tls(&frames, &with, Some(SECRET))
        .await
        .expect("frames with a client certificate");
}

#[test]
fn api_keys_off_loopback_need_tls_or_allow_plaintext() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config_with_key(dir.path());
    let config = config.to_str().expect("path");
    let check = |args: &[&str]| {
        sluice()
            .args(["serve", "--check-config", "--config", config])
            .args(args)
            .output()
            .expect("check-config")
    };
    let out = check(&["--listen", "0.0.0.0:7878"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("without TLS") && err.contains("--allow-plaintext"),
        "{err}"
    );
    let out = check(&[
        "--listen",
        "127.0.0.1:7878",
        "--frames-listen",
        "0.0.0.0:7879",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "the frame listener is held to it too"
    );

    let out = check(&["--listen", "0.0.0.0:7878", "--allow-plaintext"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["allow_plaintext"], true);

    let ca = Ca::new(dir.path(), "ca");
    ca.sign("server", &["broker.internal"]);
    let (cert, key) = (ca.path("server"), ca.path("server-key"));
    let (cert, key) = (cert.to_str().expect("path"), key.to_str().expect("path"));
    let out = check(&[
        "--listen",
        "0.0.0.0:7878",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["tls"]["cert"], cert);

    // Files that cannot serve are refused before start, naming the file.
    let wrong_key = ca.path("ca");
    for (args, says) in [
        (vec!["--tls-cert", cert], "--tls-key"),
        (
            vec!["--tls-cert", cert, "--tls-key", "/nonexistent.pem"],
            "/nonexistent.pem",
        ),
        (
            vec![
                "--tls-cert",
                cert,
                "--tls-key",
                wrong_key.to_str().expect("path"),
            ],
            "private key",
        ),
        (vec!["--tls-client-ca", cert], "--tls-cert"),
    ] {
        let out = check(&args);
        assert_ne!(out.status.code(), Some(0), "{args:?} was accepted");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `systemctl reload` sends SIGHUP whatever the configuration: a broker without TLS says
/// there is nothing to reload and keeps serving, instead of dying by the signal's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_tls_leaves_the_broker_serving() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, url, _frames, log) = serve(dir.path(), &[]);
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    wait_for_log(&log, "nothing to reload");
    assert!(
        child.try_wait().expect("status").is_none(),
        "SIGHUP stopped the broker"
    );
    let r = reqwest::get(format!("{url}/healthz"))
        .await
        .expect("healthz");
    assert_eq!(r.status(), 200);
}

/// Whether the broker closes `tcp` (end of stream or reset) within `within`.
async fn closed_within(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read = async {
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_that_never_completes_is_closed_after_the_header_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new(dir.path(), "ca");
    ca.sign("server", &["localhost", "127.0.0.1"]);
    let (cert, key) = (ca.path("server"), ca.path("server-key"));
    let (child, url, frames, _log) = serve(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().expect("path"),
            "--tls-key",
            key.to_str().expect("path"),
            "--header-read-timeout",
            "1s",
        ],
    );
    let http = url.trim_start_matches("https://").to_owned();
    // Silent after connecting, and silent halfway through a ClientHello.
    let mut silent = tokio::net::TcpStream::connect(&http)
        .await
        .expect("connect");
    let mut half = tokio::net::TcpStream::connect(&frames)
        .await
        .expect("connect");
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .expect("write");
    // Meanwhile a client that completes its handshake is served.
    let (mut stream, _) = open(&raw_client(&ca.path("ca")), &http).await;
    assert_eq!(http_get(&mut stream, "/healthz").await, "HTTP/1.1 200 OK");
    for (what, tcp) in [("HTTP", &mut silent), ("frames", &mut half)] {
        assert!(
            closed_within(tcp, Duration::from_secs(10)).await,
            "an unfinished TLS handshake on the {what} listener is still open"
        );
    }
    drop(child);
}
