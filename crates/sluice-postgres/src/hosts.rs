//! Connecting to the first of several hosts that answers, each within its own time.
//!
//! A connection string may name several hosts (`postgres://a,b/db?target_session_attrs=
//! read-write`) so that a node finds the new primary after a failover. The driver tries them in
//! order but bounds only each TCP connect: a host that accepts a connection and then answers
//! nothing (a frozen server, a proxy in front of a dead one) holds the attempt until the pool
//! gives up, and the hosts after it are never tried. Here each host but the last gets its own
//! deadline for the whole start-up, then the next is tried.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, Socket};

/// The hosts of a connection string, one configuration each, and how long each may take.
#[derive(Clone)]
pub(crate) struct Hosts {
    each: Vec<Config>,
    per_host: Duration,
}

impl Hosts {
    /// The hosts of `url` (parsed as `config`), each given `per_host` to connect and start
    /// up. A string in keyword form (`host=a,b …`) is tried as the driver tries it.
    pub(crate) fn of(url: &str, config: &Config, per_host: Duration) -> Hosts {
        let each = split_hosts(url)
            .and_then(|urls| {
                urls.iter()
                    .map(|u| Config::from_str(u).ok())
                    .collect::<Option<Vec<_>>>()
            })
            .unwrap_or_else(|| vec![config.clone()]);
        let each = each
            .into_iter()
            .map(|mut c| {
                c.connect_timeout(per_host);
                if let Some(name) = config.get_application_name() {
                    c.application_name(name);
                }
                c
            })
            .collect();
        Hosts { each, per_host }
    }

    /// The same hosts, connecting under another `application_name`.
    pub(crate) fn named(&self, name: &str) -> Hosts {
        let mut named = self.clone();
        for c in &mut named.each {
            c.application_name(name);
        }
        named
    }

    /// A connection to the first host that takes it (and, with `target_session_attrs`, has
    /// the attributes asked for).
    pub(crate) async fn connect(
        &self,
    ) -> Result<(Client, Connection<Socket, NoTlsStream>), tokio_postgres::Error> {
        let (last, before) = self.each.split_last().expect("at least one host");
        for config in before {
            if let Ok(Ok(connected)) =
                tokio::time::timeout(self.per_host, config.connect(NoTls)).await
            {
                return Ok(connected);
            }
        }
        // The last host's own failure is the answer, bounded by its connect timeout and the
        // caller's.
        last.connect(NoTls).await
    }
}

/// Connects the pool's connections through [`Hosts::connect`].
pub(crate) struct PoolConnect(pub(crate) Hosts);

impl Connect for PoolConnect {
    fn connect(
        &self,
        _: &Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        Box::pin(async move {
            let (client, connection) = self.0.connect().await?;
            let driver = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "database connection ended");
                }
            });
            Ok((client, driver))
        })
    }
}

/// One URL per host of a URL with several (`postgres://u@a:1,b:2/db?x` gives
/// `postgres://u@a:1/db?x` and `postgres://u@b:2/db?x`); `None` for one host or a string in
/// keyword form.
fn split_hosts(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    (hosts.len() > 1).then(|| {
        hosts
            .iter()
            .map(|h| format!("{scheme}://{userinfo}{h}{tail}"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_several_hosts_splits_into_one_per_host() {
        assert_eq!(
            split_hosts("postgres://u:p@a:1,[::1]:2,b/db?target_session_attrs=read-write"),
            Some(vec![
                "postgres://u:p@a:1/db?target_session_attrs=read-write".to_string(),
                "postgres://u:p@[::1]:2/db?target_session_attrs=read-write".to_string(),
                "postgres://u:p@b/db?target_session_attrs=read-write".to_string(),
            ])
        );
        assert_eq!(
            split_hosts("postgresql://a,b?dbname=x"),
            Some(vec![
                "postgresql://a?dbname=x".to_string(),
                "postgresql://b?dbname=x".to_string()
            ])
        );
        assert_eq!(split_hosts("postgres://u@a:1/db"), None);
        assert_eq!(split_hosts("host=a,b dbname=x"), None);
    }

    #[test]
    fn each_host_keeps_the_strings_settings_and_gets_its_timeout() {
        let url = "postgres://u@a:1,b:2/db?target_session_attrs=read-write";
        let mut config = Config::from_str(url).expect("parses");
        config.application_name("sluice");
        let hosts = Hosts::of(url, &config, Duration::from_secs(2));
        assert_eq!(hosts.each.len(), 2);
        for (c, port) in hosts.each.iter().zip([1, 2]) {
            assert_eq!(c.get_ports(), [port]);
            assert_eq!(c.get_dbname(), Some("db"));
            assert_eq!(c.get_user(), Some("u"));
            assert_eq!(c.get_application_name(), Some("sluice"));
            assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(2)));
            assert_eq!(
                c.get_target_session_attrs(),
                tokio_postgres::config::TargetSessionAttrs::ReadWrite
            );
        }
        assert_eq!(
            hosts.named("wake").each[0].get_application_name(),
            Some("wake")
        );
    }
}
