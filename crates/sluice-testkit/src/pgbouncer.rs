//! A PgBouncer in session mode in front of the test server, started by the test on an
//! ephemeral loopback port, for checking that broker nodes work through a connection pooler.
//!
//! PgBouncer is a program, not a service of the machine: a test starts its own. When the
//! `pgbouncer` binary is missing, a test on a developer's machine is skipped with a loud
//! message; under `CI=true` it fails (`.ci/run` installs it).

use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use crate::host::{free_port, running_as_root};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running PgBouncer, stopped when dropped.
pub struct PgBouncer {
    child: Child,
    port: u16,
    database: String,
    user: String,
    _dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts PgBouncer in session mode in front of the test server
    /// ([`crate::postgres::url`]). `None` (after a loud message) when the `pgbouncer` binary
    /// cannot be found; panics when `CI=true`, or when it is found but does not start.
    pub fn start() -> Option<PgBouncer> {
        let Some(binary) = find() else {
            return crate::host::missing("pgbouncer is not installed (apt-get install pgbouncer)");
        };
        let server: tokio_postgres::Config = crate::postgres::url()
            .parse()
            .expect("the test server's URL parses");
        let (host, server_port) = match (server.get_hosts().first(), server.get_ports().first()) {
            (Some(tokio_postgres::config::Host::Tcp(h)), port) => {
                (h.clone(), port.copied().unwrap_or(5432))
            }
            _ => panic!("the PgBouncer test needs the test server on TCP"),
        };
        let database = server.get_dbname().unwrap_or("test").to_string();
        let user = server.get_user().unwrap_or("postgres").to_string();
        let port = free_port();

        let dir = tempfile::tempdir().expect("temporary directory");
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 {database} = host={host} port={server_port} dbname={database} user={user}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = any\n\
                 pool_mode = session\n\
                 max_client_conn = 200\n\
                 default_pool_size = 100\n"
            ),
        )
        .expect("write pgbouncer.ini");
        // PgBouncer refuses to run as root; it then needs a user to switch to, who must be
        // able to read its configuration.
        let mut command = Command::new(binary);
        if running_as_root() {
            use std::os::unix::fs::PermissionsExt;
            for path in [dir.path(), ini.as_path()] {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                    .expect("make the configuration readable");
            }
            command.args(["-u", "nobody"]);
        }
        let log_path = dir.path().join("pgbouncer.log");
        let log = std::fs::File::create(&log_path).expect("create pgbouncer.log");
        let child = command
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start pgbouncer");
        let mut bouncer = PgBouncer {
            child,
            port,
            database,
            user,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                let said = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("pgbouncer exited at start ({status}):\n{said}");
            }
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not listen in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(bouncer)
    }

    /// A connection string for the test database through this PgBouncer.
    pub fn url(&self) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            self.user, self.port, self.database
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `pgbouncer` binary: on the `PATH`, or where Debian puts it (`/usr/sbin`, which is
/// not on every user's `PATH`).
fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|candidate| candidate.is_file())
}
