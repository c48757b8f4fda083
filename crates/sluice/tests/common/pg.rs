//! A broker node that reaches the test database through the test kit's fault proxy, so a test
//! can break the network between that node and the database and leave the shared server alone.

use std::str::FromStr;

use sluice_testkit::faults::FaultProxy;

/// The test database's address, and a connection string for `schema` on it that goes through
/// a new fault proxy instead: the proxy (which stops when dropped) and that string.
pub async fn proxied_store(schema: &str) -> (FaultProxy, String) {
    let real = tokio_postgres::Config::from_str(&sluice_testkit::postgres::url())
        .expect("test database URL");
    let host = match &real.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(_) => "127.0.0.1".to_string(),
    };
    let port = real.get_ports().first().copied().unwrap_or(5432);
    let target = tokio::net::lookup_host(format!("{host}:{port}"))
        .await
        .expect("the test database's address")
        .next()
        .expect("an address");
    let proxy = FaultProxy::start(target).await.expect("proxy");
    let store = format!(
        "postgres://{}@{}/{}?schema={schema}",
        real.get_user().unwrap_or("postgres"),
        proxy.addr(),
        real.get_dbname().unwrap_or("postgres")
    );
    (proxy, store)
}

/// A connection string for `schema` on the test database, straight to it.
pub fn direct_store(schema: &str) -> String {
    let url = sluice_testkit::postgres::url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}schema={schema}")
}
