//! The control port's connections and what bounds them, so that a client without credentials
//! cannot hold the control plane's memory or sockets: [`Limits`] (streams per connection, the
//! resets h2 may send or accept, deadlines, connections per client address and in all), the
//! table that counts connections per address ([`PerAddress`]), and [`Conn`], the TLS stream
//! handed to tonic, which ends a connection that has had no request in flight for too long —
//! one that never sends the HTTP/2 preface, or a request, after its handshake included.
//! Requests are counted by [`track::Tracked`], around the gRPC service. See docs/control.md
//! ("Limits on the control port").
//!
//! Only [`Conn`]'s reads look at the clock; the counting is plain data.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;

pub mod track;

/// What one control port allows. [`Limits::default`] is what `hopwise control` serves with
/// (the two connection caps are its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent streams per connection, advertised in SETTINGS; a stream past it is refused
    /// (`REFUSED_STREAM`). A proxy uses about three (its snapshot stream and a unary call).
    pub streams_per_connection: u32,
    /// Streams the server may reset because of the client's errors (refused streams and
    /// malformed frames included) before it ends the connection with `GOAWAY
    /// ENHANCE_YOUR_CALM` (the "MadeYouReset" class; tonic leaves h2's limit off).
    pub local_error_resets: usize,
    /// Streams the client opened and reset before they were accepted (rapid reset) that may
    /// wait at once; past it the connection ends.
    pub pending_accept_resets: usize,
    /// How long after its TLS handshake a connection may go without starting a request
    /// (HTTP/2 preface, SETTINGS and the request's HEADERS).
    pub first_request: Duration,
    /// How long a connection may have no request in flight once it has made one.
    pub idle: Duration,
    /// Open connections from one client address (IPv6: one /64) — past it, new ones are
    /// closed at accept, before their handshake.
    pub connections_per_address: usize,
    /// Open connections in all.
    pub connections: usize,
    /// The longest a unary call (and a stream's opening request) may take.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            streams_per_connection: 100,
            local_error_resets: 128,
            pending_accept_resets: 20,
            first_request: Duration::from_secs(5),
            idle: Duration::from_secs(60),
            connections_per_address: 256,
            connections: 4096,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Connections open per client address, and in all.
#[derive(Debug)]
pub struct PerAddress {
    per_address: usize,
    total: usize,
    open: Mutex<(HashMap<IpAddr, usize>, usize)>,
}

/// One connection counted in a [`PerAddress`]; dropping it gives its place back.
#[derive(Debug)]
pub struct Slot {
    table: Arc<PerAddress>,
    key: IpAddr,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0} connections from this address are open already")]
    Address(usize),
    #[error("{0} connections are open already")]
    Total(usize),
}

/// The address connections are counted under: the IP, or for IPv6 its /64 (one host often holds
/// a whole /64).
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl PerAddress {
    pub fn new(limits: &Limits) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            per_address: limits.connections_per_address,
            total: limits.connections,
            open: Mutex::new((HashMap::new(), 0)),
        })
    }

    fn open(&self) -> MutexGuard<'_, (HashMap<IpAddr, usize>, usize)> {
        match self.open.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A place for a connection from `ip`, if one is left.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let key = address_key(ip);
        let mut open = self.open();
        let (by_address, total) = &mut *open;
        if *total >= self.total {
            return Err(Refused::Total(self.total));
        }
        let n = by_address.entry(key).or_insert(0);
        if *n >= self.per_address {
            return Err(Refused::Address(self.per_address));
        }
        *n += 1;
        *total += 1;
        Ok(Slot {
            table: self.clone(),
            key,
        })
    }

    /// Connections open from `ip`'s address.
    pub fn count(&self, ip: IpAddr) -> usize {
        self.open().0.get(&address_key(ip)).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.table.open();
        let (by_address, total) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = by_address.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_address.remove(&self.key);
            }
        }
    }
}

/// What one connection is doing, shared by its stream ([`Conn`]) and its requests.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// When the last request ended (or the handshake, before the first).
    idle_since: Mutex<Instant>,
    /// The connection's reader, woken when its last request ends so its deadline starts.
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            reader: Mutex::new(None),
        })
    }

    /// A request started; it counts until the returned guard drops (its response ends).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.served.store(true, Ordering::SeqCst);
        InFlight(self.clone())
    }

    fn idle_since(&self) -> Instant {
        match self.idle_since.lock() {
            Ok(t) => *t,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn set_reader(&self, waker: &Waker) {
        let mut reader = match self.reader.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        if !reader.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *reader = Some(waker.clone());
        }
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            match self.0.idle_since.lock() {
                Ok(mut t) => *t = Instant::now(),
                Err(poisoned) => *poisoned.into_inner() = Instant::now(),
            }
            let reader = match self.0.reader.lock() {
                Ok(r) => r.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            };
            if let Some(w) = reader {
                w.wake();
            }
        }
    }
}

/// What tonic puts in every request's extensions: where the connection comes from, and its
/// [`Activity`].
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    pub activity: Arc<Activity>,
}

/// A TLS connection on the control port, counted in its [`PerAddress`] while it is open. A read
/// that would wait while no request is in flight past the deadline ([`Limits::first_request`]
/// before the first request, [`Limits::idle`] after) reads end of file instead, and hyper
/// closes the connection.
pub struct Conn {
    inner: TlsStream<TcpStream>,
    info: ConnInfo,
    first_request: Duration,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    _slot: Slot,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("remote", &self.info.remote)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// A connection whose handshake just ended.
    pub fn new(
        inner: TlsStream<TcpStream>,
        remote: SocketAddr,
        slot: Slot,
        limits: &Limits,
    ) -> Conn {
        let activity = Activity::new();
        Conn {
            inner,
            info: ConnInfo { remote, activity },
            first_request: limits.first_request,
            idle: limits.idle,
            deadline: Box::pin(tokio::time::sleep(limits.first_request)),
            _slot: slot,
        }
    }

    /// Whether the connection has been without a request for too long (and, if not, a wake-up
    /// at the deadline).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let activity = &self.info.activity;
        // The waker first: a request that ends after the count is read still wakes this read.
        activity.set_reader(cx.waker());
        if activity.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let allowed = if activity.served.load(Ordering::SeqCst) {
            self.idle
        } else {
            self.first_request
        };
        let deadline = activity.idle_since() + allowed;
        if self.deadline.deadline() != deadline {
            self.deadline.as_mut().reset(deadline);
        }
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending if self.expired(cx) => {
                tracing::info!(peer = %self.info.remote, "closing a connection without requests");
                // End of file: hyper ends the connection (it has no stream open).
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_address: usize, total: usize) -> Limits {
        Limits {
            connections_per_address: per_address,
            connections: total,
            ..Limits::default()
        }
    }

    #[test]
    fn counts_connections_per_address_and_gives_places_back() {
        let table = PerAddress::new(&limits(2, 10));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let one = table.admit(a).unwrap();
        let _two = table.admit(a).unwrap();
        assert_eq!(table.admit(a).unwrap_err(), Refused::Address(2));
        let _other = table.admit(b).unwrap();
        drop(one);
        assert_eq!(table.count(a), 1);
        let _three = table.admit(a).unwrap();
        assert_eq!(table.count(a), 2);
    }

    #[test]
    fn caps_connections_in_all() {
        let table = PerAddress::new(&limits(10, 2));
        let _a = table.admit("10.0.0.1".parse().unwrap()).unwrap();
        let _b = table.admit("10.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(
            table.admit("10.0.0.3".parse().unwrap()).unwrap_err(),
            Refused::Total(2)
        );
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64_and_mapped_ipv4_as_ipv4() {
        let table = PerAddress::new(&limits(1, 10));
        let _a = table.admit("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert!(
            table
                .admit("2001:db8:1:2:ffff::9".parse().unwrap())
                .is_err()
        );
        let _b = table.admit("2001:db8:1:3::1".parse().unwrap()).unwrap();
        let _c = table.admit("10.0.0.1".parse().unwrap()).unwrap();
        assert!(table.admit("::ffff:10.0.0.1".parse().unwrap()).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_holds_the_connection_and_its_end_starts_the_clock() {
        let activity = Activity::new();
        let started = Instant::now();
        assert_eq!(activity.idle_since(), started);
        let request = activity.begin();
        assert_eq!(activity.in_flight.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(7)).await;
        drop(request);
        assert_eq!(activity.in_flight.load(Ordering::SeqCst), 0);
        assert!(activity.served.load(Ordering::SeqCst));
        assert_eq!(activity.idle_since(), started + Duration::from_secs(7));
    }
}
