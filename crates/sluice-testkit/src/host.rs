//! What this machine gives a test that starts servers of its own: free loopback ports, and
//! whether it runs as root (database servers refuse to, and must be started as another user).

use std::net::{Ipv4Addr, TcpListener};

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
}

/// True when this process's effective user is root (read from `/proc`, Linux only).
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The user and group ids of the account `name`, from `/etc/passwd`.
pub fn account(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// Fails the test under `CI=true` (where `.ci/run` installs every tool), or prints a loud
/// message and returns `None` so that the test skips on a developer's machine.
pub fn missing<T>(what: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} (CI=true: this test must run)");
    }
    eprintln!("\n!!!! SKIPPED: {what} !!!!\n");
    None
}
