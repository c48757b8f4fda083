//! A highly available PostgreSQL on loopback for failover tests: one etcd member and two
//! PostgreSQL servers managed by Patroni with synchronous replication, from Debian's
//! `etcd-server`, `patroni` and `postgresql` packages, started by the test in a temporary
//! directory on free ports and stopped when dropped.
//!
//! [`HaPostgres::kill`] simulates the death of a database machine: SIGKILL of its Patroni and
//! of its postmaster. The survivor's Patroni takes the leader key once it expires (its `ttl`,
//! 20 s, Patroni's least) and promotes its server; [`HaPostgres::restart`] brings the dead
//! member back, and Patroni rewinds it (`pg_rewind`) and makes it the synchronous standby.
//!
//! When a tool is missing, a test on a developer's machine is skipped with a loud message;
//! under `CI=true` it fails (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::host::{account, free_port, missing, running_as_root};

/// The database the cluster creates for tests.
pub const DATABASE: &str = "test";

/// One etcd member and two Patroni members; everything is stopped when dropped.
pub struct HaPostgres {
    dir: tempfile::TempDir,
    etcd: Child,
    members: Vec<Member>,
    /// Run as this account's ids (the process runs as root, which PostgreSQL refuses).
    owner: Option<(u32, u32)>,
}

struct Member {
    pg_port: u16,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    patroni: Option<Child>,
}

impl HaPostgres {
    /// Starts etcd and both members and waits until there is a leader with a synchronous
    /// standby. `None` (after a loud message) when a tool is missing; panics under
    /// `CI=true`, or when the cluster does not come up within two minutes.
    pub async fn start() -> Option<HaPostgres> {
        for tool in ["patroni", "etcd"] {
            if !on_path(tool) {
                return missing(&format!(
                    "{tool} is not installed (apt-get install patroni etcd-server)"
                ));
            }
        }
        let Some(bin) = postgres_bin() else {
            return missing(
                "PostgreSQL's server binaries are not installed (apt-get install postgresql)",
            );
        };
        let owner = if running_as_root() {
            match account("postgres") {
                Some(ids) => Some(ids),
                None => {
                    return missing(
                        "running as root and there is no postgres account to run PostgreSQL as",
                    );
                }
            }
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("sluice-ha-")
            .tempdir()
            .expect("temporary directory");
        let root = dir.path().to_path_buf();
        for sub in ["etcd", "run", "log"] {
            std::fs::create_dir(root.join(sub)).expect("lab directories");
        }
        // etcd refuses a data directory others may read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("etcd"), std::fs::Permissions::from_mode(0o700))
            .expect("etcd directory");
        let (etcd_client, etcd_peer) = (free_port(), free_port());
        let etcd = Command::new("etcd")
            .args(["--name", "e0", "--data-dir"])
            .arg(root.join("etcd"))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!("--initial-cluster=e0=http://127.0.0.1:{etcd_peer}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("log/etcd.log")).expect("etcd log"))
            .spawn()
            .expect("start etcd");
        let bootstrap = root.join("post_bootstrap.sh");
        std::fs::write(
            &bootstrap,
            format!(
                "#!/bin/sh\nset -e\nexec {} \"$1\" -qX -v ON_ERROR_STOP=1 -c 'CREATE DATABASE {DATABASE}'\n",
                bin.join("psql").display()
            ),
        )
        .expect("post_bootstrap script");
        std::fs::set_permissions(&bootstrap, std::fs::Permissions::from_mode(0o755))
            .expect("post_bootstrap script");
        let mut members = Vec::new();
        for n in 1..=2 {
            let (pg_port, rest_port) = (free_port(), free_port());
            let config = root.join(format!("pg{n}.yml"));
            let data = root.join(format!("pg{n}"));
            let yaml = member_yaml(&Settings {
                name: format!("pg{n}"),
                rest_port,
                pg_port,
                etcd_client,
                root: &root,
                data: &data,
                bin: &bin,
                bootstrap: &bootstrap,
            });
            std::fs::write(&config, yaml).expect("member configuration");
            members.push(Member {
                pg_port,
                config,
                data,
                log: root.join(format!("log/pg{n}.log")),
                patroni: None,
            });
        }
        if let Some((uid, gid)) = owner {
            chown_tree(&root, uid, gid);
        }
        let mut cluster = HaPostgres {
            dir,
            etcd,
            members,
            owner,
        };
        cluster.restart(0);
        // The second member clones the first once it leads, rather than racing it to bootstrap.
        cluster.wait_for_leader(Duration::from_secs(90)).await;
        cluster.restart(1);
        cluster.wait_healthy(Duration::from_secs(120)).await;
        Some(cluster)
    }

    /// A multi-host connection string for the test database that connects to whichever
    /// member takes writes (`target_session_attrs=read-write`), as a broker node would.
    pub fn url(&self) -> String {
        self.url_via(&self.addrs())
    }

    /// Every member's PostgreSQL address, for putting something between them and a node.
    pub fn addrs(&self) -> Vec<std::net::SocketAddr> {
        self.members
            .iter()
            .map(|m| std::net::SocketAddr::from(([127, 0, 0, 1], m.pg_port)))
            .collect()
    }

    /// As [`HaPostgres::url`], naming `addrs` (one per member, in order) instead of the
    /// members' own addresses.
    pub fn url_via(&self, addrs: &[std::net::SocketAddr]) -> String {
        let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        format!(
            "postgres://postgres@{}/{DATABASE}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The member that takes writes now, if one does.
    pub async fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if let Some(false) = in_recovery(m.pg_port).await {
                return Some(i);
            }
        }
        None
    }

    /// Whether there is a leader whose synchronous standby is streaming to it, and Patroni
    /// knows it for the synchronous standby (only that member may be promoted in synchronous
    /// mode: before Patroni records it, a dead leader would not be replaced).
    pub async fn healthy(&self) -> bool {
        let Some(l) = self.leader().await else {
            return false;
        };
        let sql = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'";
        if query_i64(self.members[l].pg_port, sql).await != Some(1) {
            return false;
        }
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(&self.members[l].config)
            .args(["list", "--format", "json"])
            .output();
        let listed = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        listed.is_ok_and(|text| {
            text.split('}').any(|member| {
                member.contains(r#""Role": "Sync Standby""#)
                    && (member.contains(r#""State": "streaming""#)
                        || member.contains(r#""State": "running""#))
            })
        })
    }

    /// Waits until some member takes writes; returns it.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.leader().await {
                return l;
            }
            self.assert_before(deadline, "no member took writes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until there is a leader with a synchronous standby.
    pub async fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.healthy().await {
            self.assert_before(deadline, "no leader with a synchronous standby");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL of member `i`'s Patroni and postmaster, as if its machine died.
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut p) = m.patroni.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
        if let Some(pid) = postmaster(&m.data) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }

    /// Starts member `i`'s Patroni (again); it rejoins as a standby by itself.
    pub fn restart(&mut self, i: usize) {
        let owner = self.owner;
        let home = self.dir.path().to_path_buf();
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("member log");
        let mut command = match owner {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--clear-groups",
                    "patroni",
                ]);
                c
            }
            None => Command::new("patroni"),
        };
        let child = command
            .arg(&m.config)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("member log"))
            .stderr(log)
            .spawn()
            .expect("start patroni");
        m.patroni = Some(child);
    }

    /// Turns `synchronous_mode_strict` on or off. Strict, a primary whose synchronous
    /// standby is gone commits nothing until one is back; not strict (the default here),
    /// Patroni lets it commit alone after a moment.
    pub fn set_strict(&self, strict: bool) {
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(&self.members[0].config)
            .args(["edit-config", "--quiet", "--force", "--set"])
            .arg(format!("synchronous_mode_strict={strict}"))
            .output()
            .expect("run patronictl");
        assert!(
            out.status.success(),
            "patronictl edit-config: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The last lines of every log, for a failure message.
    fn logs(&self) -> String {
        let mut out = String::new();
        let etcd = self.dir.path().join("log/etcd.log");
        for path in self.members.iter().map(|m| m.log.clone()).chain([etcd]) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("--- {}\n", path.display()));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    fn assert_before(&self, deadline: Instant, what: &str) {
        assert!(Instant::now() < deadline, "{what}:\n{}", self.logs());
    }
}

impl Drop for HaPostgres {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

/// The cluster-wide settings Patroni bootstraps with, as `docs/postgres-ha.md` shows them:
/// synchronous mode (not strict: a leader left alone commits without a standby rather than
/// stopping; [`HaPostgres::set_strict`] changes it), Patroni's shortest timings (`ttl` 20 s,
/// `loop_wait` 1 s, `retry_timeout` 3 s) so that a failover takes seconds, and `pg_rewind` so
/// that a dead leader rejoins as a standby.
pub const DCS: &str = r#"bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
"#;

/// What one member's configuration names.
struct Settings<'a> {
    name: String,
    rest_port: u16,
    pg_port: u16,
    etcd_client: u16,
    root: &'a Path,
    data: &'a Path,
    bin: &'a Path,
    bootstrap: &'a Path,
}

/// A member's Patroni configuration: [`DCS`], room for the broker nodes' connections, a
/// standby that retries its stream every half second (the default 5 s slows each rejoin),
/// trust authentication on loopback only.
fn member_yaml(s: &Settings<'_>) -> String {
    format!(
        r#"scope: sluice-ha
namespace: /service/
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
{dcs}        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
  initdb:
    - encoding: UTF8
    - no-locale
    - auth-local: trust
    - auth-host: trust
  post_bootstrap: {bootstrap}
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {root}/pgpass-{name}
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {root}/run
    shared_buffers: 32MB
    fsync: "on"
    wal_retrieve_retry_interval: 500ms
  pg_hba:
    - local all all trust
    - local replication all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  basebackup:
    - checkpoint: fast
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
"#,
        dcs = DCS,
        name = s.name,
        rest = s.rest_port,
        etcd = s.etcd_client,
        pg = s.pg_port,
        bootstrap = s.bootstrap.display(),
        data = s.data.display(),
        bin = s.bin.display(),
        root = s.root.display(),
    )
}

/// Whether `program` is on the `PATH`.
fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
}

/// The newest installed PostgreSQL's binaries (Debian: `/usr/lib/postgresql/N/bin`).
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// `path` and everything under it to `uid:gid`.
fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown");
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("read dir") {
            chown_tree(&e.expect("entry").path(), uid, gid);
        }
    }
}

/// The postmaster's process id from its data directory, if it runs.
fn postmaster(data: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// `pg_is_in_recovery()` of the server on `port`, if it answers.
async fn in_recovery(port: u16) -> Option<bool> {
    let client = connect(port).await?;
    let row = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .ok()?;
    row.try_get(0).ok()
}

async fn query_i64(port: u16, sql: &str) -> Option<i64> {
    let client = connect(port).await?;
    let row = client.query_one(sql, &[]).await.ok()?;
    row.try_get(0).ok()
}

async fn connect(port: u16) -> Option<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(1));
    let (client, conn) = tokio::time::timeout(
        Duration::from_secs(2),
        config.connect(tokio_postgres::NoTls),
    )
    .await
    .ok()?
    .ok()?;
    tokio::spawn(conn);
    Some(client)
}
