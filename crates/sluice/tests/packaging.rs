//! What an operator installing the binary uses before the broker runs: shell completions and
//! `sluice serve --check-config`.

use std::path::Path;
use std::process::{Command, Output};

mod common;

use common::{BIN, sluice};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `program` runs here.
fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Writes `script` to `dir/name` and checks its syntax with `shell -n`.
fn syntax_ok(dir: &Path, name: &str, shell: &str, check: &[&str], script: &str) {
    let path = dir.join(name);
    std::fs::write(&path, script).expect("write the script");
    let out = Command::new(shell)
        .args(check)
        .arg(&path)
        .output()
        .expect("run the shell");
    assert!(
        out.status.success(),
        "{shell} finds the completion script invalid: {}",
        text(&out.stderr)
    );
}

#[test]
fn completion_scripts_are_valid_and_know_the_subcommands() {
    let dir = tempfile::tempdir().expect("temp dir");
    for shell in ["bash", "zsh", "fish"] {
        let out = sluice()
            .args(["completions", shell])
            .output()
            .expect("run sluice");
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        // Fish names long options without their dashes.
        for word in ["serve", "queue", "redrive", "completions", "check-config"] {
            assert!(script.contains(word), "the {shell} script lacks {word}");
        }
        match shell {
            "bash" => syntax_ok(dir.path(), "sluice.bash", "bash", &["-n"], &script),
            "zsh" if installed("zsh") => {
                syntax_ok(dir.path(), "_sluice", "zsh", &["-n"], &script);
            }
            "fish" if installed("fish") => {
                syntax_ok(
                    dir.path(),
                    "sluice.fish",
                    "fish",
                    &["--no-execute"],
                    &script,
                );
            }
            _ => eprintln!("{shell} is not installed: its script's syntax is not checked"),
        }
    }
    let out = sluice()
        .args(["completions", "tcsh"])
        .output()
        .expect("run sluice");
    assert!(!out.status.success(), "an unknown shell is refused");
    assert!(
        text(&out.stderr).contains("bash"),
        "the error lists the shells"
    );
}

/// `sluice serve --check-config` with `args`.
fn check(args: &[&str]) -> Output {
    sluice()
        .args(["serve", "--check-config"])
        .args(args)
        .output()
        .expect("run sluice")
}

#[test]
fn check_config_prints_the_effective_settings_without_secrets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sluice.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            r#"
            listen = "127.0.0.1:7001"
            data_dir = "{}"
            sync_interval = "100ms"
            idle_timeout = "90s"
            request_timeout = "4s"
            max_connections = 500
            push_allow = ["10.0.0.0/8", "hooks.internal"]

            [[queues]]
            name = "hooks"
            max_receive_count = 3
            push = {{ url = "https://app.example/hook?token=query-secret-value", secret = "push-secret-value", headers = {{ authorization = "Bearer header-secret-value" }} }}

            [[keys]]
            name = "ops"
            role = "admin"
            sha256 = "{}"
            "#,
            data.display(),
            "ab".repeat(32)
        ),
    )
    .expect("write the config");
    let config = config.to_str().expect("utf-8 path");
    // A flag wins over the file.
    let out = check(&[
        "--config",
        config,
        "--listen",
        "127.0.0.1:7002",
        "--header-read-timeout",
        "5s",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for secret in [
        "push-secret-value",
        "header-secret-value",
        "query-secret-value",
        &"ab".repeat(32),
    ] {
        assert!(!shown.contains(secret), "{secret} is printed:\n{shown}");
    }
    let v: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(v["listen"], "127.0.0.1:7002");
    assert_eq!(v["store"], "embedded");
    assert_eq!(v["sync_interval_ms"], 100);
    assert_eq!(v["header_read_timeout_ms"], 5000);
    assert_eq!(v["idle_timeout_ms"], 90_000);
    assert_eq!(v["request_timeout_ms"], 4000);
    assert_eq!(v["max_connections"], 500);
    assert_eq!(v["authentication"], true);
    assert_eq!(v["keys"][0]["name"], "ops");
    assert_eq!(v["keys"][0]["role"], "admin");
    assert_eq!(v["queues"][0]["name"], "hooks");
    assert_eq!(v["queues"][0]["config"]["max_receive_count"], 3);
    assert_eq!(v["queues"][0]["config"]["push"]["signed"], true);
    assert_eq!(
        v["queues"][0]["config"]["push"]["url"],
        "https://app.example/hook?token=(redacted)"
    );
    assert_eq!(
        v["push_allow"],
        serde_json::json!(["10.0.0.0/8", "hooks.internal"])
    );
    assert!(!data.exists(), "checking opened the data directory");

    // The store's password is redacted; the environment fills in what the flags leave out.
    let out = sluice()
        .args(["serve", "--check-config"])
        .env(
            "SLUICE_STORE",
            "postgres://sluice:db-password@db.internal:5432/sluice",
        )
        .output()
        .expect("run sluice");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(!shown.contains("db-password"), "{shown}");
    let v: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(v["store"], "postgres://sluice:***@db.internal:5432/sluice");
    assert_eq!(v["listen"], "127.0.0.1:7878", "the default");
    assert_eq!(v["authentication"], false);
    assert_eq!(v["header_read_timeout_ms"], 10_000, "the default");
    assert_eq!(v["idle_timeout_ms"], 75_000, "the default");
    assert_eq!(v["request_timeout_ms"], 10_000, "the default");
    let max = v["max_connections"].as_u64().expect("max_connections");
    assert!(
        (1..=4096).contains(&max),
        "the default, within the open-file limit: {max}"
    );
}

/// A request timeout that would cut every request, or outlast every client, is refused
/// with what is allowed.
#[test]
fn check_config_refuses_a_request_timeout_out_of_range() {
    for bad in ["50ms", "11m"] {
        let out = check(&["--request-timeout", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(
            err.contains("--request-timeout (request_timeout) must be between 100ms and 600 s"),
            "{err}"
        );
    }
}

#[test]
fn check_config_refuses_push_targets_that_are_not_public_or_the_broker_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("sluice.toml");
    let declare = |url: &str| {
        std::fs::write(
            &config,
            format!(
                r#"
                listen = "127.0.0.1:7001"
                frames_listen = "127.0.0.1:7002"

                [[queues]]
                name = "hooks"
                push = {{ url = "{url}" }}
                "#
            ),
        )
        .expect("write the config");
        config.to_str().expect("utf-8 path").to_owned()
    };
    let config_path = declare("http://127.0.0.1:9/hook");
    let out = check(&["--config", &config_path]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    for says in ["[[queues]] hooks", "loopback", "--push-allow 127.0.0.1/32"] {
        assert!(err.contains(says), "the error says {says}: {err}");
    }
    let out = check(&["--config", &config_path, "--push-allow", "127.0.0.1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Its own listeners, whatever push_allow says.
    for (url, listener) in [
        (
            "http://127.0.0.1:7001/v1/queues/billing/purge",
            "own http listener",
        ),
        ("http://127.0.0.1:7002/", "own frames listener"),
    ] {
        let config_path = declare(url);
        let out = check(&["--config", &config_path, "--push-allow", "127.0.0.0/8"]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        let err = text(&out.stderr);
        assert!(err.contains(listener), "{url}: {err}");
    }
    let out = check(&["--push-allow", "not a network"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a CIDR"),
        "{}",
        text(&out.stderr)
    );
}

#[cfg(unix)]
#[test]
fn serve_raises_its_open_file_limit_to_the_hard_limit() {
    let shell = |script: &str| {
        let out = Command::new("sh")
            .args(["-c", script])
            .output()
            .expect("run sh");
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let hard = shell("ulimit -Hn");
    let hard: u64 = match hard.trim() {
        "unlimited" => 1 << 20,
        n => n.parse::<u64>().expect("a number").min(1 << 20),
    };
    if hard <= 256 {
        eprintln!("SKIPPED: the hard open-file limit is {hard}, nothing to raise");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_sluice");
    // Started with a soft limit of 256, as a shell with a low `ulimit -n` would.
    let shown = shell(&format!(
        "ulimit -Sn 256 && exec '{bin}' serve --check-config"
    ));
    let v: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(v["open_file_limit"], hard, "{shown}");
    let listeners =
        1 + u64::from(!v["frames_listen"].is_null()) + u64::from(!v["sqs_listen"].is_null());
    assert_eq!(
        v["max_connections"].as_u64(),
        Some(4096.min(hard / 4 * 3 / listeners)),
        "the default follows the raised limit: {shown}"
    );
}

#[test]
fn check_config_exits_2_and_says_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad_queue = dir.path().join("bad.toml");
    std::fs::write(
        &bad_queue,
        "[[queues]]\nname = \"orders\"\nvisiblity_timeout_ms = 1000\n",
    )
    .expect("write");
    let bad_queue = bad_queue.to_str().expect("utf-8 path");
    for (args, says) in [
        (vec!["--listen", "0.0.0.0:7878"], "without API keys"),
        (vec!["--sync-interval", "5m"], "--sync-interval"),
        (vec!["--store", "mysql://x"], "neither `embedded`"),
        (vec!["--idle-timeout", "0s"], "--idle-timeout"),
        (vec!["--max-connections", "0"], "--max-connections"),
        (vec!["--config", bad_queue], "orders"),
        (
            vec!["--config", "/nonexistent/sluice.toml"],
            "reading config file",
        ),
    ] {
        let out = check(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed settings");
    }
}

/// The repository's root, where `Dockerfile` and `deploy/` live.
fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_systemd_unit_verifies() {
    if !installed("systemd-analyze") {
        eprintln!("systemd-analyze is not installed: deploy/sluice.service is not verified");
        return;
    }
    let unit = std::fs::read_to_string(repo().join("deploy/sluice.service")).expect("read unit");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/sluice serve"),
        "{unit}"
    );
    // Verified with the binary just built in the place the unit names.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("sluice.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/sluice", BIN)).expect("write unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let said = text(&out.stderr) + &text(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.trim().is_empty(),
        "systemd-analyze has remarks on the unit:\n{said}"
    );
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_unprivileged_with_a_health_check() {
    let root = repo();
    let file = std::fs::read_to_string(root.join("Dockerfile")).expect("read Dockerfile");
    // Instructions, with continuation lines joined.
    let joined = file
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let steps: Vec<(&str, &str)> = joined
        .lines()
        .filter_map(|l| l.trim().split_once(' '))
        .collect();
    let of = |kw: &str| -> Vec<&str> {
        steps
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(kw))
            .map(|(_, v)| v.trim())
            .collect()
    };
    let froms = of("FROM");
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    let stage = froms[0]
        .split_whitespace()
        .last()
        .expect("the build stage's name");
    assert!(
        of("COPY")
            .iter()
            .any(|c| c.contains(&format!("--from={stage}"))),
        "the runtime copies the binary from the build stage"
    );
    let runtime_from = joined
        .lines()
        .position(|l| l.trim().starts_with("FROM") && l.contains(froms[1]))
        .expect("runtime stage");
    let users: Vec<&str> = joined
        .lines()
        .skip(runtime_from)
        .filter_map(|l| l.trim().strip_prefix("USER "))
        .collect();
    assert!(
        users
            .last()
            .is_some_and(|u| !["root", "0"].contains(&u.trim())),
        "the runtime stage runs as a non-root user: {users:?}"
    );
    assert!(of("VOLUME").iter().any(|v| v.contains("/var/lib/sluice")));
    let env = of("ENV").join(" ");
    assert!(env.contains("SLUICE_DATA_DIR=/var/lib/sluice"), "{env}");
    let port = env
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("SLUICE_LISTEN="))
        .and_then(|addr| addr.rsplit_once(':'))
        .map(|(_, p)| p.to_owned())
        .expect("SLUICE_LISTEN with a port");
    assert!(of("EXPOSE").contains(&port.as_str()), "EXPOSE {port}");
    let health = of("HEALTHCHECK").join(" ");
    assert!(
        health.contains(&format!("127.0.0.1:{port}/healthz")),
        "the health check asks /healthz on the port listened on: {health}"
    );
    assert!(of("ENTRYPOINT").iter().any(|e| e.contains("sluice")));
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    assert!(
        ignored.lines().any(|l| l.trim() == "target"),
        "the build context leaves out target/"
    );
}
