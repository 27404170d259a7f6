//! Time limits on one served connection, above what hyper bounds itself. hyper's HTTP/1 server
//! times the reading of every request head, the first and those between keep-alive requests;
//! but hyper-util's HTTP/1-or-HTTP/2 detection reads the preface with no timer, and its HTTP/2
//! server waits for a first request, and between requests, for ever. So every connection is
//! raced against one timer here:
//!
//! - until its first request head arrives, the connection is closed at the header-read deadline
//!   (counted from the accept, so a TLS handshake spends from the same allowance);
//! - then, when no request has been open and none has started or ended for a whole idle period,
//!   it is asked to go away (HTTP/2: GOAWAY; HTTP/1: closed between requests), and closed if it is
//!   still there, still idle, a header-read period later.
//!
//! A request costs two uncontended atomic additions on one word ([`Activity`]) and a reference
//! count: the timer reads that word when it fires, and the request path never touches the timer.
//! The look itself ([`look`]) is pure.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service;
use tokio::sync::watch;
use tokio::time::Instant;

/// One change (a request started or ended) in the upper half of [`Activity`]'s word.
const CHANGE: u64 = 1 << 32;

/// The requests of one connection: how many are open now (lower 32 bits) and how many times
/// that number changed (upper 32 bits, wrapping). A request is open from its head to the end of
/// its response body.
#[derive(Debug, Default)]
pub struct Activity(AtomicU64);

/// What [`Activity`] says at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub open: u32,
    pub changes: u32,
}

impl Activity {
    fn enter(self: &Arc<Self>) -> Open {
        self.0.fetch_add(CHANGE + 1, Ordering::Relaxed);
        Open(self.clone())
    }

    pub fn seen(&self) -> Seen {
        let v = self.0.load(Ordering::Relaxed);
        Seen {
            open: v as u32,
            changes: (v >> 32) as u32,
        }
    }
}

/// One open request; ends it on drop.
#[derive(Debug)]
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        // One more change, one fewer open (the lower half is at least 1: no borrow).
        self.0.0.fetch_add(CHANGE - 1, Ordering::Relaxed);
    }
}

/// A service whose requests [`Activity`] counts.
#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S, B> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let open = self.activity.enter();
        TrackedFuture {
            inner: self.inner.call(req),
            open: Some(open),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer on its way; the request stays open in its response body.
    pub struct TrackedFuture<F> {
        #[pin]
        inner: F,
        open: Option<Open>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let resp = std::task::ready!(this.inner.poll(cx))?;
        let open = this.open.take();
        Poll::Ready(Ok(resp.map(|inner| TrackedBody { inner, _open: open })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request open until hyper drops it (sent, or abandoned).
    pub struct TrackedBody<B> {
        #[pin]
        inner: B,
        _open: Option<Open>,
    }
}

impl<B: Body> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection-level limits (from [`crate::config::ListenerTimeouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From the accept to the first request head; also the grace after asking to go away.
    pub header_read: Duration,
    /// No request open, started or ended for this long: go away.
    pub idle: Duration,
}

/// Where a connection's timer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request head yet.
    FirstHead,
    /// Serving; `changes` as seen at the last look.
    Serving { changes: u32 },
    /// Asked to go away for idleness.
    GoingAway,
}

/// What to do with the connection when its timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Drop it: closed at once.
    Close,
    /// Ask it to finish (GOAWAY; HTTP/1 closes once idle), and look again after `wait`.
    GoAway { wait: Duration },
    /// Look again after `wait`.
    Wait { wait: Duration, then: Phase },
}

/// The timer has fired in `phase` and the connection's requests look like `seen`. Pure.
pub fn look(phase: Phase, seen: Seen, limits: Limits) -> Step {
    let idle_since_last = |changes: u32| seen.open == 0 && seen.changes == changes;
    match phase {
        Phase::FirstHead if seen.changes == 0 => Step::Close,
        Phase::FirstHead => Step::Wait {
            wait: limits.idle,
            then: Phase::Serving {
                changes: seen.changes,
            },
        },
        Phase::Serving { changes } if idle_since_last(changes) => Step::GoAway {
            wait: limits.header_read,
        },
        Phase::Serving { .. } => Step::Wait {
            wait: limits.idle,
            then: Phase::Serving {
                changes: seen.changes,
            },
        },
        Phase::GoingAway if seen.open == 0 => Step::Close,
        Phase::GoingAway => Step::Wait {
            wait: limits.header_read,
            then: Phase::GoingAway,
        },
    }
}

/// A served connection that can be asked to finish (hyper-util's `auto::Connection`).
pub trait Finish: Future {
    fn finish(self: Pin<&mut Self>);
}

impl<I, S, E, B> Finish for hyper_util::server::conn::auto::Connection<'static, I, S, E>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    E: hyper_util::server::conn::auto::HttpServerConnExec<S::Future, B>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E, B> Finish for hyper_util::server::conn::auto::UpgradeableConnection<'static, I, S, E>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    E: hyper_util::server::conn::auto::HttpServerConnExec<S::Future, B>,
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// One connection's timer: made at the accept, it counts the connection's requests and drives
/// the connection to its end.
#[derive(Debug)]
pub struct Guard {
    activity: Arc<Activity>,
    accepted: Instant,
    limits: Limits,
}

impl Guard {
    pub fn new(limits: Limits) -> Guard {
        Guard {
            activity: Arc::default(),
            accepted: Instant::now(),
            limits,
        }
    }

    /// `svc`, with its requests counted for this connection's timer.
    /// When the first request's head must have arrived (counted from the accept).
    pub fn header_deadline(&self) -> Instant {
        self.accepted + self.limits.header_read
    }

    pub fn track<S>(&self, svc: S) -> Tracked<S> {
        Tracked {
            inner: svc,
            activity: self.activity.clone(),
        }
    }

    /// Serves `conn` to its end, or closes it when [`look`] says so. When `drain` turns true
    /// the connection is asked to finish (requests in flight complete). The connection comes
    /// boxed: moved into this future by value it took room twice in every connection's task.
    pub async fn drive<C: Finish>(self, mut conn: Pin<Box<C>>, mut drain: watch::Receiver<bool>) {
        let mut draining = false;
        let mut phase = Phase::FirstHead;
        let timer = tokio::time::sleep_until(self.accepted + self.limits.header_read);
        let mut timer = std::pin::pin!(timer);
        loop {
            if !draining && *drain.borrow_and_update() {
                draining = true;
                conn.as_mut().finish();
            }
            tokio::select! {
                biased;
                _ = conn.as_mut() => return,
                changed = drain.changed(), if !draining => {
                    if changed.is_err() {
                        // The worker is gone: nothing will ask again.
                        draining = true;
                        conn.as_mut().finish();
                    }
                }
                () = timer.as_mut() => {
                    let now = Instant::now();
                    match look(phase, self.activity.seen(), self.limits) {
                        Step::Close => return,
                        Step::GoAway { wait } => {
                            conn.as_mut().finish();
                            phase = Phase::GoingAway;
                            timer.as_mut().reset(now + wait);
                        }
                        Step::Wait { wait, then } => {
                            phase = then;
                            timer.as_mut().reset(now + wait);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header_read: Duration::from_millis(300),
        idle: Duration::from_secs(5),
    };

    fn seen(open: u32, changes: u32) -> Seen {
        Seen { open, changes }
    }

    #[test]
    fn no_first_head_in_time_closes() {
        assert_eq!(look(Phase::FirstHead, seen(0, 0), LIMITS), Step::Close);
        let serving = Phase::Serving { changes: 1 };
        assert_eq!(
            look(Phase::FirstHead, seen(1, 1), LIMITS),
            Step::Wait {
                wait: LIMITS.idle,
                then: serving
            }
        );
    }

    #[test]
    fn only_a_whole_idle_period_asks_to_go_away_and_a_request_still_open_is_never_cut() {
        let serving = |changes| Phase::Serving { changes };
        // A request ended during the period: not idle for all of it.
        assert!(matches!(
            look(serving(1), seen(0, 2), LIMITS),
            Step::Wait {
                then: Phase::Serving { changes: 2 },
                ..
            }
        ));
        // One request open the whole period (a long stream): not idle.
        assert!(matches!(
            look(serving(1), seen(1, 1), LIMITS),
            Step::Wait { .. }
        ));
        assert_eq!(
            look(serving(2), seen(0, 2), LIMITS),
            Step::GoAway {
                wait: LIMITS.header_read
            }
        );
        assert_eq!(look(Phase::GoingAway, seen(0, 2), LIMITS), Step::Close);
        assert!(matches!(
            look(Phase::GoingAway, seen(1, 3), LIMITS),
            Step::Wait {
                then: Phase::GoingAway,
                ..
            }
        ));
    }

    #[test]
    fn activity_counts_open_requests_and_changes() {
        let a = Arc::new(Activity::default());
        let one = a.enter();
        let two = a.enter();
        assert_eq!(a.seen(), seen(2, 2));
        drop(one);
        assert_eq!(a.seen(), seen(1, 3));
        drop(two);
        assert_eq!(a.seen(), seen(0, 4));
    }
}
