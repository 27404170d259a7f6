//! Each worker's kept-alive HTTP/1.1 connections ([`H1Pool`]): a stack of hyper `SendRequest`
//! per destination, taken and given back by the request's own task, idled out after the pool's
//! idle timeout; under the upstream's `limits.max_connections` for all workers together, a
//! request at the cap waits for a busy connection to finish or a slot to come back.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::connect::{ConnectError, Connector};
use super::{Dest, classify_connect, classify_hyper};
use crate::error::ProxyError;
use crate::limits::{Connections, Slot};
use crate::replay::ReplayBody;

type Sender = hyper::client::conn::http1::SendRequest<ReplayBody>;

/// Why a request failed on an HTTP/1.1 connection, and the request itself if it never left.
#[derive(Debug)]
pub struct Failed {
    pub error: ProxyError,
    pub unsent: Option<Request<ReplayBody>>,
}

struct Idle {
    send: Sender,
    /// Since when it is known to be idle (given back, or last seen busy).
    since: Instant,
}

type Stacks = Vec<(Dest, Vec<Idle>)>;

/// One worker's kept-alive HTTP/1.1 connections, a stack per destination, taken and given
/// back by the requests' own tasks. hyper-util's legacy pool cost a spawned task, a pool lock
/// and two SipHash rounds per request (docs/performance.md); this is a short scan of a few
/// destinations under a lock nobody else holds (one worker, one thread).
///
/// Every connection holds a slot of the upstream's [`Connections`] (shared by the workers'
/// pools): at the cap a request waits for a connection of its own pool to finish its exchange,
/// or for a slot to come back, and the pools close their idle connections to make room.
pub struct H1Pool {
    connector: Connector,
    idle_timeout: Duration,
    stacks: Arc<Mutex<Stacks>>,
    reaper: AtomicBool,
    slots: Arc<Connections>,
    /// Destinations requests of this pool wait for (one entry per request): their
    /// connections are theirs as soon as they are ready, never closed to make room.
    waited: Arc<Mutex<Vec<Dest>>>,
}

/// One request waiting in [`H1Pool::open`]; leaves the list on drop.
struct Waiting<'a>(&'a Mutex<Vec<Dest>>, &'a Dest);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut w = lock(self.0);
        if let Some(i) = w.iter().position(|d| d == self.1) {
            w.swap_remove(i);
        }
    }
}

impl std::fmt::Debug for H1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Pool")
            .field("connector", &self.connector)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Drops closed connections and those idle for `timeout` (the server may be closing them just
/// now); a connection still busy counts as idle from now.
fn prune(stack: &mut Vec<Idle>, now: Instant, timeout: Duration) {
    stack.retain_mut(|i| {
        if i.send.is_closed() {
            return false;
        }
        if !i.send.is_ready() {
            i.since = now;
        }
        now.saturating_duration_since(i.since) < timeout
    });
}

/// How often a request waiting for a slot held by another worker asks the pools again to
/// close their idle connections (nobody is told when an exchange ends).
const ASK_AGAIN: Duration = Duration::from_millis(20);

/// Drops the connections that are idle and ready (their slots come back when they close).
fn evict_idle(stack: &mut Vec<Idle>) {
    stack.retain(|i| !i.send.is_closed() && !i.send.is_ready());
}

impl H1Pool {
    /// Connections idle longer than `idle_timeout` are closed, never reused. No cap on their
    /// number (the local app's pools).
    pub fn new(connector: Connector, idle_timeout: Duration) -> Self {
        H1Pool::capped(connector, idle_timeout, Connections::unlimited())
    }

    /// As [`H1Pool::new`], each connection holding one of `slots`.
    pub fn capped(connector: Connector, idle_timeout: Duration, slots: Arc<Connections>) -> Self {
        H1Pool {
            connector,
            idle_timeout,
            stacks: Arc::new(Mutex::new(Vec::new())),
            reaper: AtomicBool::new(false),
            slots,
            waited: Arc::default(),
        }
    }

    /// Sends `req` (origin-form, with its `Host`) on an idle connection to `dest`, or a new one.
    pub async fn send(
        &self,
        dest: &Dest,
        req: Request<ReplayBody>,
    ) -> Result<Response<Incoming>, ProxyError> {
        self.try_send(dest, req).await.map_err(|f| f.error)
    }

    /// As [`H1Pool::send`]; a request that never left comes back with the error.
    pub async fn try_send(
        &self,
        dest: &Dest,
        req: Request<ReplayBody>,
    ) -> Result<Response<Incoming>, Failed> {
        let mut send = match self.take(dest) {
            Some(s) => s,
            None => match self.open(dest).await {
                Ok(s) => s,
                Err(e) => {
                    return Err(Failed {
                        error: classify_connect(&e),
                        unsent: Some(req),
                    });
                }
            },
        };
        let response = send.try_send_request(req);
        // Back at once: it is not ready again until this exchange is over, so no other request
        // takes it before, and nothing has to run when the response body ends.
        self.give_back(dest, send);
        response.await.map_err(|mut e| match e.take_message() {
            Some(req) => Failed {
                error: ProxyError::ResetBeforeRequest,
                unsent: Some(req),
            },
            None => Failed {
                error: classify_hyper(e.error()).unwrap_or(ProxyError::Reset),
                unsent: None,
            },
        })
    }

    fn take(&self, dest: &Dest) -> Option<Sender> {
        self.take_where(dest, |s| s.is_ready())
    }

    /// The most recently given back connection to `dest` that `fits`.
    fn take_where(&self, dest: &Dest, fits: impl Fn(&Sender) -> bool) -> Option<Sender> {
        let now = Instant::now();
        let mut stacks = lock(&self.stacks);
        let stack = stacks
            .iter_mut()
            .find_map(|(d, s)| (d == dest).then_some(s))?;
        prune(stack, now, self.idle_timeout);
        let i = stack.iter().rposition(|i| fits(&i.send))?;
        Some(stack.remove(i).send)
    }

    /// A connection to `dest` for a request that found none idle: a new one while the
    /// upstream's connections are under the cap; at the cap, the first of this pool's busy
    /// connections to `dest` that finishes its exchange, or a slot that comes back.
    async fn open(&self, dest: &Dest) -> Result<Sender, ConnectError> {
        let mut waiting = None;
        loop {
            let freed = self.slots.freed();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.slots.try_take() {
                return self.connect(dest, slot).await;
            }
            if let Some(send) = self.take(dest) {
                return Ok(send);
            }
            if waiting.is_none() {
                lock(&self.waited).push(dest.clone());
                waiting = Some(Waiting(&self.waited, dest));
            }
            self.slots.want();
            let Some(mut busy) = self.take_where(dest, |_| true) else {
                // Another worker's connections hold the slots: its pool closes them once idle,
                // when asked again.
                let _ = tokio::time::timeout(ASK_AGAIN, freed).await;
                continue;
            };
            tokio::select! {
                ready = busy.ready() => if ready.is_ok() {
                    return Ok(busy);
                },
                () = freed => self.give_back(dest, busy),
            }
        }
    }

    fn give_back(&self, dest: &Dest, send: Sender) {
        let idle = Idle {
            send,
            since: Instant::now(),
        };
        let mut stacks = lock(&self.stacks);
        match stacks.iter_mut().find(|(d, _)| d == dest) {
            Some((_, stack)) => stack.push(idle),
            None => stacks.push((dest.clone(), vec![idle])),
        }
        drop(stacks);
        if !self.reaper.swap(true, Ordering::Relaxed) {
            tokio::spawn(reap(
                Arc::downgrade(&self.stacks),
                self.idle_timeout,
                self.slots.clone(),
                self.waited.clone(),
            ));
        }
    }

    async fn connect(&self, dest: &Dest, slot: Slot) -> Result<Sender, ConnectError> {
        let io = self.connector.connect(dest).await?;
        let (send, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| ConnectError::Io {
                addr: dest.to_string(),
                source: io::Error::other(e),
            })?;
        tokio::spawn(async move {
            // The slot is the connection's: back when it ends.
            let _slot = slot;
            if let Err(e) = conn.await {
                tracing::debug!("upstream connection ended: {e}");
            }
        });
        Ok(send)
    }
}

/// Closes idle connections past the timeout even when no request comes to find them, and
/// every idle one when a request of any worker waits for a slot of the upstream (except those
/// to a destination a request of this pool waits for: they are its).
async fn reap(
    stacks: Weak<Mutex<Stacks>>,
    timeout: Duration,
    slots: Arc<Connections>,
    waited: Arc<Mutex<Vec<Dest>>>,
) {
    loop {
        let evict = tokio::select! {
            () = tokio::time::sleep(timeout) => false,
            () = slots.wanted() => true,
        };
        let Some(stacks) = stacks.upgrade() else {
            return;
        };
        let now = Instant::now();
        let waited = lock(&waited).clone();
        let mut s = lock(&stacks);
        for (dest, stack) in s.iter_mut() {
            if !evict {
                prune(stack, now, timeout);
            } else if !waited.contains(dest) {
                evict_idle(stack);
            }
        }
        s.retain(|(_, stack)| !stack.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;

    /// A server that answers 200 and counts the connections it accepted.
    async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"ok"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        (addr, accepted)
    }

    async fn get(pool: &H1Pool, dest: &Dest) -> u16 {
        use http_body_util::BodyExt;
        let req = Request::builder()
            .uri("/")
            .header(http::header::HOST, "test")
            .body(ReplayBody::empty())
            .unwrap();
        let resp = pool.send(dest, req).await.unwrap();
        let status = resp.status().as_u16();
        resp.into_body().collect().await.unwrap();
        status
    }

    #[tokio::test]
    async fn connections_are_reused_and_dropped_after_the_idle_timeout() {
        let (addr, accepted) = server().await;
        let pool = H1Pool::new(
            Connector::plain(Duration::from_secs(1)),
            Duration::from_millis(300),
        );
        let dest = Dest::Addr(addr);
        for _ in 0..3 {
            assert_eq!(get(&pool, &dest).await, 200);
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(get(&pool, &dest).await, 200);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "idle past the timeout: a new one"
        );
    }
}
