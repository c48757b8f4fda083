//! A broker node that reaches the test database through the test kit's fault proxy, so a test
//! can break the network between that node and the database and leave the shared server alone.

use std::net::SocketAddr;
use std::str::FromStr;

use sluice_testkit::faults::FaultProxy;

/// The test database's user, database name and address.
async fn target() -> (String, String, SocketAddr) {
    let real = tokio_postgres::Config::from_str(&sluice_testkit::postgres::url())
        .expect("test database URL");
    let host = match &real.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(_) => "127.0.0.1".to_string(),
    };
    let port = real.get_ports().first().copied().unwrap_or(5432);
    let addr = tokio::net::lookup_host(format!("{host}:{port}"))
        .await
        .expect("the test database's address")
        .next()
        .expect("an address");
    let user = real.get_user().unwrap_or("postgres").to_string();
    let db = real.get_dbname().unwrap_or("postgres").to_string();
    (user, db, addr)
}

/// A connection string for `schema` on the test database that goes through a new fault proxy:
/// the proxy (which stops when dropped) and that string.
pub async fn proxied_store(schema: &str) -> (FaultProxy, String) {
    let (user, db, addr) = target().await;
    let proxy = FaultProxy::start(addr).await.expect("proxy");
    let store = format!("postgres://{user}@{}/{db}?schema={schema}", proxy.addr());
    (proxy, store)
}

/// A multi-host connection string for `schema` whose first host is a new fault proxy to the
/// test database and whose second is the database itself: the proxy and that string.
pub async fn proxy_first_store(schema: &str) -> (FaultProxy, String) {
    let (user, db, addr) = target().await;
    let proxy = FaultProxy::start(addr).await.expect("proxy");
    let store = format!(
        "postgres://{user}@{},{addr}/{db}?schema={schema}",
        proxy.addr()
    );
    (proxy, store)
}

/// A multi-host connection string for `schema` whose first host is `dead` and whose second is
/// the test database.
pub async fn dead_first_store(dead: SocketAddr, schema: &str) -> String {
    let (user, db, addr) = target().await;
    format!("postgres://{user}@{dead},{addr}/{db}?schema={schema}")
}

/// An address on loopback that answers no connection, as a dead machine's: a listener that
/// never accepts, whose backlog is full, so the kernel drops every new SYN and a connect waits
/// until its timeout (a closed port would refuse at once, which is the easy case). Keep the
/// returned value alive as long as the address must stay dead.
pub async fn dead_address() -> (
    tokio::net::TcpListener,
    Vec<tokio::net::TcpStream>,
    SocketAddr,
) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("address");
    let mut filling = Vec::new();
    // A backlog of 0 still queues one or two connections; fill it.
    for _ in 0..4 {
        match tokio::time::timeout(
            std::time::Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(stream)) => filling.push(stream),
            _ => break,
        }
    }
    (listener, filling, addr)
}

/// A connection string for `schema` on the test database, straight to it.
pub fn direct_store(schema: &str) -> String {
    let url = sluice_testkit::postgres::url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}schema={schema}")
}
