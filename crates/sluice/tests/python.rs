//! The Python SDK (`python/`) and its Ray Serve adapter, driven from `cargo test`: the pytest
//! suites against the real `sluice serve` built here, and Rust↔Python interoperation both
//! ways (a Rust producer with a Python worker, a Python producer with a Rust worker).
//!
//! The interpreter is `$SLUICE_PYTHON`, else `python/.venv/bin/python` when it exists, else
//! `python3`; the package is taken from `python/src`, so the working copy is what is tested.
//! A missing interpreter or package (pytest, ray[serve] for the Ray test) skips the
//! test with a loud message on a developer's machine and fails it when `CI=true`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use sluice_client::wire::QueueConfigRequest;
use sluice_client::{Client, ResultExt, TaskContext, TaskError, TaskStatus, Worker};

/// The machine has few cores: the Python suites (each with brokers, one with Ray) run one at
/// a time so their timings stay meaningful.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python")
        .canonicalize()
        .expect("the python/ directory of the repository")
}

fn interpreter() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = python_dir().join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// A Python command with the package of this checkout, the broker binary and quiet output.
fn python() -> Command {
    let dir = python_dir();
    let mut path = vec![dir.join("src"), dir.join("tests")];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        path.extend(std::env::split_paths(&old));
    }
    let mut cmd = Command::new(interpreter());
    cmd.current_dir(&dir)
        .env(
            "PYTHONPATH",
            std::env::join_paths(path).expect("PYTHONPATH"),
        )
        .env("SLUICE_BIN", common::BIN)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// True when the interpreter can import `modules`; otherwise skips loudly, or fails on CI.
fn have(modules: &str, what: &str) -> bool {
    let out = python()
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let why = match out {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
        Err(e) => format!("cannot run {}: {e}", interpreter().display()),
    };
    let msg = format!(
        "{what} needs Python with {modules}: {why}\n  install them with: python3 -m pip install -e \
         'python[test,ray]' (or set SLUICE_PYTHON to an interpreter that has them)"
    );
    common::skip_or_fail(&msg);
    false
}

fn pytest(args: &[&str]) {
    let started = Instant::now();
    let status = python()
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"])
        .args(args)
        .status()
        .expect("run pytest");
    eprintln!("pytest {args:?}: {:.1}s", started.elapsed().as_secs_f64());
    assert!(status.success(), "pytest {args:?} failed: {status}");
}

#[test]
fn python_sdk_suite() {
    let _serial = serial();
    if have("pytest", "the Python SDK suite") {
        pytest(&["tests", "-m", "not ray"]);
    }
}

#[test]
fn ray_serve_end_to_end() {
    let _serial = serial();
    if have("pytest, ray.serve", "the Ray Serve end-to-end test") {
        pytest(&["tests/test_ray.py", "-m", "ray", "-s"]);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn finished(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[derive(Debug, Serialize, Deserialize)]
struct Resize {
    url: String,
    width: u32,
}

#[test]
fn rust_producer_python_worker() {
    let _serial = serial();
    if !have("sluice", "Rust-to-Python interop") {
        return;
    }
    let broker = common::broker();
    runtime().block_on(async {
        let client = Client::new(&broker.url).expect("client");
        let cfg = QueueConfigRequest {
            max_receive_count: Some(2),
            backoff_base_ms: Some(50),
            ..QueueConfigRequest::default()
        };
        client.put_queue("to-python", &cfg).await.expect("queue");
        let add = client
            .enqueue("to-python", "add", &(2, 3))
            .await
            .expect("add");
        let resize = client
            .enqueue(
                "to-python",
                "resize",
                &Resize {
                    url: "s3://cat.png".into(),
                    width: 64,
                },
            )
            .await
            .expect("resize");
        let shout = client
            .enqueue("to-python", "shout", "hi")
            .await
            .expect("shout");
        let ping = client
            .enqueue("to-python", "ping", &())
            .await
            .expect("ping");
        let bad = client
            .enqueue(
                "to-python",
                "resize",
                &Resize {
                    url: "s3://x".into(),
                    width: 0,
                },
            )
            .await
            .expect("bad resize");

        let out = tokio::task::spawn_blocking({
            let url = broker.url.clone();
            move || {
                python()
                    .args(["tests/interop/python_worker.py", &url, "to-python", "5"])
                    .output()
                    .expect("run the Python worker")
            }
        })
        .await
        .expect("join");
        assert!(out.status.success(), "{}", finished(&out));

        let wait = Duration::from_secs(10);
        let result = |id: &str| {
            let client = client.clone();
            let id = id.to_owned();
            async move {
                let v = client.wait_for(&id, wait).await.expect("status");
                assert_eq!(v.status, TaskStatus::Success, "{id}: {v:?}");
                v.decoded_result()
                    .expect("result")
                    .expect("a result")
                    .json::<serde_json::Value>()
                    .expect("JSON")
            }
        };
        assert_eq!(result(&add).await, json!(5));
        assert_eq!(
            result(&resize).await,
            json!({"url": "s3://cat.png", "width": 64, "by": "python"})
        );
        assert_eq!(result(&shout).await, json!("HI!"));
        assert_eq!(result(&ping).await, json!("pong"));
        let failed = client.wait_for(&bad, wait).await.expect("status");
        assert_eq!(failed.status, TaskStatus::Failure);
        assert_eq!(
            failed.error.as_deref(),
            Some("width must be positive, got 0")
        );
        assert_eq!(failed.receive_count, 1, "a permanent error is not retried");
    });
}

#[test]
fn python_producer_rust_worker() {
    let _serial = serial();
    if !have("sluice", "Python-to-Rust interop") {
        return;
    }
    let broker = common::broker();
    runtime().block_on(async {
        let client = Client::new(&broker.url).expect("client");
        client
            .put_queue("from-python", &QueueConfigRequest::default())
            .await
            .expect("queue");
        let worker = Worker::builder(client.clone(), "from-python")
            .poll_wait(Duration::from_millis(200))
            .handler("mul", |_ctx: TaskContext, (a, b): (i64, i64)| async move {
                Ok(a * b)
            })
            .handler("resize", |_ctx: TaskContext, r: Resize| async move {
                if r.width == 0 {
                    return Err(TaskError::permanent(format!(
                        "width must be positive, got {}",
                        r.width
                    )));
                }
                Ok(json!({"url": r.url, "width": r.width, "by": "rust"}))
            })
            .handler("shout", |_ctx: TaskContext, s: String| async move {
                Ok(format!("{}!", s.to_uppercase()))
            })
            .handler(
                "ping",
                |_ctx: TaskContext, (): ()| async move { Ok("pong") },
            )
            .build()
            .expect("worker");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(worker.run_until(async {
            let _ = stopped.await;
        }));

        let out = tokio::task::spawn_blocking({
            let url = broker.url.clone();
            move || {
                python()
                    .args(["tests/interop/python_producer.py", &url, "from-python"])
                    .output()
                    .expect("run the Python producer")
            }
        })
        .await
        .expect("join");
        let _ = stop.send(());
        running.await.expect("worker task").expect("worker");
        assert!(out.status.success(), "{}", finished(&out));
        let report: serde_json::Value = serde_json::from_slice(
            out.stdout
                .split(|b| *b == b'\n')
                .rfind(|l| !l.is_empty())
                .unwrap_or_default(),
        )
        .expect("the producer's report");
        assert_eq!(report["checked"], 6, "{report}");
        assert_eq!(report["mismatches"], json!([]), "{report}");
    });
}
