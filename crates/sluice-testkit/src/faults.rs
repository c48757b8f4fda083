//! A fault-injecting TCP proxy on loopback, to put between a broker node and its database and
//! break the network on purpose: it passes bytes both ways until told to drop every
//! connection, blackhole them (nothing goes through either way, as when a cable is pulled;
//! what was sent is delivered once the fault clears, as TCP would retransmit it), delay every
//! chunk, or go half-open (the node's requests still arrive, the database's answers do not).
//!
//! A fault applies to the connections already open and to new ones, from the moment it is set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Bytes pass both ways.
    #[default]
    None,
    /// Every open connection is closed, and every new one closed as soon as it is accepted.
    Drop,
    /// Nothing passes either way; held bytes go through once the fault clears.
    Blackhole,
    /// Every chunk waits this long before it is passed on, both ways.
    Delay(Duration),
    /// Bytes from the client pass; bytes from the server are held until the fault clears.
    HalfOpen,
}

/// Which way a pump carries bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Client to server.
    Out,
    /// Server to client.
    Back,
}

impl Fault {
    /// Whether bytes going `way` are held.
    fn holds(self, way: Way) -> bool {
        matches!(self, Fault::Blackhole) || (self == Fault::HalfOpen && way == Way::Back)
    }
}

/// A running proxy; it stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards to `target`.
    ///
    /// # Errors
    /// Binding the port.
    pub async fn start(target: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (fault, rx) = watch::channel(Fault::None);
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                if *rx.borrow() == Fault::Drop {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, target, rx.clone()));
            }
        });
        Ok(FaultProxy {
            addr,
            fault,
            accepted,
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the fault, for open and new connections alike.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// Connections accepted so far (dropped ones too).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Pumps see the channel close and end, closing their connections.
        self.fault.send_replace(Fault::Drop);
    }
}

/// Carries one client connection to `target` and back, under the faults of `rx`.
async fn relay(client: TcpStream, target: SocketAddr, rx: watch::Receiver<Fault>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, rx.clone(), Way::Out),
        pump(server_read, client_write, rx, Way::Back),
    );
}

/// Waits until the fault lets bytes go `way`; false when the connection is to be dropped.
async fn may_pass(rx: &mut watch::Receiver<Fault>, way: Way) -> bool {
    loop {
        let fault = *rx.borrow_and_update();
        if fault == Fault::Drop {
            return false;
        }
        if !fault.holds(way) {
            return true;
        }
        if rx.changed().await.is_err() {
            return false;
        }
    }
}

/// Copies `from` to `to` chunk by chunk, each chunk held, delayed or dropped as the fault
/// says when it is read.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rx: watch::Receiver<Fault>,
    way: Way,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            },
            changed = rx.changed() => {
                if changed.is_err() || *rx.borrow() == Fault::Drop {
                    return;
                }
                continue;
            }
        };
        if !may_pass(&mut rx, way).await {
            return;
        }
        let fault = *rx.borrow();
        if let Fault::Delay(d) = fault {
            tokio::time::sleep(d).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server that counts the bytes it received.
    async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let count = Arc::clone(&count);
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        count.fetch_add(n, Ordering::Relaxed);
                    }
                });
            }
        });
        (addr, received)
    }

    /// Reads `want` bytes within `wait`: Some(bytes), or None when they did not come.
    async fn read_within(s: &mut TcpStream, want: usize, wait: Duration) -> Option<Vec<u8>> {
        let mut got = vec![0u8; want];
        match tokio::time::timeout(wait, s.read_exact(&mut got)).await {
            Ok(Ok(_)) => Some(got),
            _ => None,
        }
    }

    #[tokio::test]
    async fn bytes_pass_and_a_delay_holds_each_chunk() {
        let (target, _) = echo().await;
        let proxy = FaultProxy::start(target).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        c.write_all(b"ping").await.expect("write");
        let got = read_within(&mut c, 4, Duration::from_secs(5)).await;
        assert_eq!(got.as_deref(), Some(&b"ping"[..]));

        proxy.set(Fault::Delay(Duration::from_millis(150)));
        let start = Instant::now();
        c.write_all(b"pong").await.expect("write");
        let got = read_within(&mut c, 4, Duration::from_secs(5)).await;
        assert_eq!(got.as_deref(), Some(&b"pong"[..]));
        // Out and back: two chunks, each held 150 ms.
        assert!(
            start.elapsed() >= Duration::from_millis(300),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(proxy.accepted(), 1);
    }

    #[tokio::test]
    async fn a_blackhole_holds_everything_until_it_clears() {
        let (target, received) = echo().await;
        let proxy = FaultProxy::start(target).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        proxy.set(Fault::Blackhole);
        c.write_all(b"lost?").await.expect("write");
        assert_eq!(
            read_within(&mut c, 5, Duration::from_millis(300)).await,
            None
        );
        assert_eq!(
            received.load(Ordering::Relaxed),
            0,
            "nothing reached the server"
        );
        proxy.set(Fault::None);
        let got = read_within(&mut c, 5, Duration::from_secs(5)).await;
        assert_eq!(
            got.as_deref(),
            Some(&b"lost?"[..]),
            "delivered once it cleared"
        );
    }

    #[tokio::test]
    async fn half_open_lets_requests_in_and_no_answer_out() {
        let (target, received) = echo().await;
        let proxy = FaultProxy::start(target).await.expect("proxy");
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        proxy.set(Fault::HalfOpen);
        c.write_all(b"query").await.expect("write");
        assert_eq!(
            read_within(&mut c, 5, Duration::from_millis(300)).await,
            None
        );
        assert_eq!(received.load(Ordering::Relaxed), 5, "the request arrived");
        proxy.set(Fault::None);
        let got = read_within(&mut c, 5, Duration::from_secs(5)).await;
        assert_eq!(got.as_deref(), Some(&b"query"[..]));
    }

    #[tokio::test]
    async fn drop_closes_open_connections_and_refuses_new_ones() {
        let (target, _) = echo().await;
        let proxy = FaultProxy::start(target).await.expect("proxy");
        let mut open = TcpStream::connect(proxy.addr()).await.expect("connect");
        open.write_all(b"hi").await.expect("write");
        assert!(
            read_within(&mut open, 2, Duration::from_secs(5))
                .await
                .is_some()
        );
        proxy.set(Fault::Drop);
        let mut buf = [0u8; 8];
        let closed = tokio::time::timeout(Duration::from_secs(5), open.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "the open connection is closed: {closed:?}"
        );
        let mut fresh = TcpStream::connect(proxy.addr()).await.expect("connect");
        let closed = tokio::time::timeout(Duration::from_secs(5), fresh.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "a new connection is closed: {closed:?}"
        );
        proxy.set(Fault::None);
        let mut again = TcpStream::connect(proxy.addr()).await.expect("connect");
        again.write_all(b"back").await.expect("write");
        let got = read_within(&mut again, 4, Duration::from_secs(5)).await;
        assert_eq!(got.as_deref(), Some(&b"back"[..]), "the network returned");
    }
}
