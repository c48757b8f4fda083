//! How long and how many connections each listener keeps, and the process's open-file
//! limit that bounds how many it can.

use anyhow::bail;

use super::settings::flag_or_file;
use crate::config::FileConfig;

/// The longest header-read or idle timeout accepted.
const MAX_CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The connection limits of every listener (`listeners` of them), from flags, file and
/// defaults. Without a setting, `max_connections` is lowered so that all listeners full
/// still leave a quarter of the process's open-file limit to the store and push targets.
pub(super) fn connection_limits(
    (header_flag, idle_flag, write_flag, max_flag): (
        Option<std::time::Duration>,
        Option<std::time::Duration>,
        Option<std::time::Duration>,
        Option<usize>,
    ),
    file: &FileConfig,
    listeners: usize,
) -> anyhow::Result<sluice_server::ConnectionLimits> {
    use sluice_server::listen::connections;
    let timeout = |flag: Option<std::time::Duration>, text: Option<&str>, key: &str, default| {
        let d =
            flag_or_file(flag, text, key, crate::client::args::parse_duration)?.unwrap_or(default);
        if d.is_zero() || d > MAX_CONNECTION_TIMEOUT {
            bail!(
                "--{} ({key}) must be between 1ms and {} s",
                key.replace('_', "-"),
                MAX_CONNECTION_TIMEOUT.as_secs()
            );
        }
        Ok(d)
    };
    let header_read_timeout = timeout(
        header_flag,
        file.header_read_timeout.as_deref(),
        "header_read_timeout",
        connections::DEFAULT_HEADER_READ_TIMEOUT,
    )?;
    let idle_timeout = timeout(
        idle_flag,
        file.idle_timeout.as_deref(),
        "idle_timeout",
        connections::DEFAULT_IDLE_TIMEOUT,
    )?;
    let write_timeout = timeout(
        write_flag,
        file.write_timeout.as_deref(),
        "write_timeout",
        connections::DEFAULT_WRITE_TIMEOUT,
    )?;
    let open_files = open_file_limit();
    let max_connections = match max_flag.or(file.max_connections) {
        Some(0) => bail!("--max-connections (max_connections) must be at least 1"),
        Some(n) => {
            if let Some(limit) = open_files
                && n.saturating_mul(listeners) as u64 >= limit
            {
                tracing::warn!(
                    max_connections = n,
                    listeners,
                    open_file_limit = limit,
                    "max_connections on every listener exceeds the open-file limit: when all \
                     are full, accepts fail and the store may not open files; raise the limit \
                     (ulimit -n, LimitNOFILE=) or lower max_connections"
                );
            }
            n
        }
        None => {
            let budget = open_files.map_or(u64::MAX, |limit| limit / 4 * 3 / listeners as u64);
            connections::DEFAULT_MAX_CONNECTIONS
                .min(usize::try_from(budget.max(1)).unwrap_or(usize::MAX))
        }
    };
    Ok(sluice_server::ConnectionLimits {
        header_read_timeout,
        idle_timeout,
        write_timeout,
        max_connections,
    })
}

/// The longest request timeout accepted: past it a client has long given up.
const MAX_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// How long a request may take beyond its long-poll wait before it is answered 503, from
/// the flag, the file or the default.
pub(super) fn request_timeout(
    flag: Option<std::time::Duration>,
    file: &FileConfig,
) -> anyhow::Result<std::time::Duration> {
    let d = flag_or_file(
        flag,
        file.request_timeout.as_deref(),
        "request_timeout",
        crate::client::args::parse_duration,
    )?
    .unwrap_or(sluice_server::DEFAULT_REQUEST_TIMEOUT);
    if d < std::time::Duration::from_millis(100) || d > MAX_REQUEST_TIMEOUT {
        bail!(
            "--request-timeout (request_timeout) must be between 100ms and {} s, got {}",
            MAX_REQUEST_TIMEOUT.as_secs(),
            sluice_core::human::fmt_duration(d)
        );
    }
    Ok(d)
}

/// Highest soft open-file limit the broker raises itself to (Linux refuses "unlimited").
#[cfg(unix)]
const MOST_OPEN_FILES: u64 = 1 << 20;

/// The process's open-file limit (the soft one, which applies), when there is one — first
/// raised to the hard limit, as servers do: the usual soft default of 1,024 would cap
/// connections far below what the system allows a process that asks.
pub(super) fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let hard = limit
            .maximum
            .unwrap_or(MOST_OPEN_FILES)
            .min(MOST_OPEN_FILES);
        match limit.current {
            Some(soft) if soft < hard => {
                let raised = Rlimit {
                    current: Some(hard),
                    maximum: limit.maximum,
                };
                match setrlimit(Resource::Nofile, raised) {
                    Ok(()) => {
                        tracing::info!(
                            from = soft,
                            to = hard,
                            "raised the open-file limit to the hard limit"
                        );
                        Some(hard)
                    }
                    Err(e) => {
                        tracing::warn!(limit = soft, error = %e, "could not raise the open-file limit; connections are capped by it");
                        Some(soft)
                    }
                }
            }
            current => current,
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}
