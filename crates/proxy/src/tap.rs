//! The live tap: `GET /tap[?route=R]` on the admin endpoint (`hopwise tap`) streams one JSON
//! line per request through this proxy as it finishes — the access log's line (`access_log`'s
//! `Line`, the same fields), whether or not the service logs. Nobody tapping costs the request
//! path one relaxed atomic load ([`Tap::on`]); the access-log hook makes its entry only when a
//! line will go somewhere. A tapper gets a bounded queue ([`QUEUE`] lines): a request never
//! waits for it, and a line that does not fit is dropped, counted for that tapper (told to it as
//! `{"dropped":N}` before its next line) and in `hopwise_tap_dropped_total`. At most
//! [`MAX_TAPPERS`] at once (more: 503); they end when the proxy shuts down ([`Tap::close`]).
//! This module knows nothing of the line's contents: the caller renders it, only if a tapper
//! wants its route.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// Tappers of one proxy at once.
pub const MAX_TAPPERS: usize = 4;
/// Lines waiting for one tapper at most (a line is a few hundred bytes).
pub const QUEUE: usize = 256;

/// The tappers of one proxy, shared by its workers and its admin endpoint.
#[derive(Debug)]
pub struct Tap {
    /// How many tap now: the request path's one load.
    on: AtomicUsize,
    closed: AtomicBool,
    next_id: AtomicU64,
    tappers: Mutex<Vec<(Arc<Tapper>, mpsc::Sender<Bytes>)>>,
    dropped: Counter,
}

/// One tapper as the request path sees it.
#[derive(Debug)]
struct Tapper {
    id: u64,
    /// Only this route's requests (`None`: every one).
    route: Option<String>,
    /// Lines lost since the tapper last heard of it.
    dropped: AtomicU64,
}

/// Why a tap was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{MAX_TAPPERS} tappers already; try again when one ends")]
    Full,
    #[error("the proxy is shutting down")]
    Closed,
}

impl Tap {
    pub fn new(dropped: Counter) -> Tap {
        Tap {
            on: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            tappers: Mutex::new(Vec::new()),
            dropped,
        }
    }

    /// Is anyone tapping? The request path's only question while nobody is.
    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed) != 0
    }

    fn tappers(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<Tapper>, mpsc::Sender<Bytes>)>> {
        self.tappers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new tapper of `route` (or every route): its stream of lines.
    pub fn subscribe(self: &Arc<Self>, route: Option<String>) -> Result<Stream, Refused> {
        let mut tappers = self.tappers();
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        if tappers.len() >= MAX_TAPPERS {
            return Err(Refused::Full);
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let tapper = Arc::new(Tapper {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            route,
            dropped: AtomicU64::new(0),
        });
        tappers.push((tapper.clone(), tx));
        self.on.store(tappers.len(), Ordering::Relaxed);
        Ok(Stream {
            tap: self.clone(),
            tapper,
            rx,
        })
    }

    /// A request of `route` finished: its line (rendered by `line`, once, only if a tapper
    /// wants it) to every tapper of that route, never waiting; a full queue drops and counts.
    pub fn publish(&self, route: Option<&str>, line: impl FnOnce() -> Vec<u8>) {
        let tappers = self.tappers();
        let wants = |t: &Tapper| t.route.is_none() || t.route.as_deref() == route;
        if !tappers.iter().any(|(t, _)| wants(t)) {
            return;
        }
        let line = Bytes::from(line());
        for (t, tx) in tappers.iter().filter(|(t, _)| wants(t)) {
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(line.clone()) {
                t.dropped.fetch_add(1, Ordering::Relaxed);
                self.dropped.inc();
            }
        }
    }

    /// Ends every tap (their queued lines still go out) and refuses new ones: shutdown.
    pub fn close(&self) {
        let mut tappers = self.tappers();
        self.closed.store(true, Ordering::Release);
        tappers.clear();
        self.on.store(0, Ordering::Relaxed);
    }

    fn remove(&self, id: u64) {
        let mut tappers = self.tappers();
        tappers.retain(|(t, _)| t.id != id);
        self.on.store(tappers.len(), Ordering::Relaxed);
    }
}

/// One tapper's lines, as a response body: each line a frame, `{"dropped":N}` first when lines
/// were lost since the last one. Dropping it (the tapper went away) ends the tap.
#[derive(Debug)]
pub struct Stream {
    tap: Arc<Tap>,
    tapper: Arc<Tapper>,
    rx: mpsc::Receiver<Bytes>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.tap.remove(self.tapper.id);
    }
}

impl Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let lost = this.tapper.dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let notice = format!("{{\"dropped\":{lost}}}\n");
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(notice)))));
        }
        this.rx
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(Frame::data(l))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn tap() -> Arc<Tap> {
        Arc::new(Tap::new(Counter::default()))
    }

    async fn next(s: &mut Stream) -> Option<String> {
        let f = s.frame().await?.ok()?;
        String::from_utf8(f.into_data().ok()?.to_vec()).ok()
    }

    #[tokio::test]
    async fn lines_reach_the_tappers_of_their_route() {
        let t = tap();
        assert!(!t.on());
        let mut all = t.subscribe(None).unwrap();
        let mut quote = t.subscribe(Some("quote".into())).unwrap();
        assert!(t.on());
        t.publish(Some("quote"), || "q\n".into());
        t.publish(Some("order"), || "o\n".into());
        assert_eq!(next(&mut all).await.as_deref(), Some("q\n"));
        assert_eq!(next(&mut all).await.as_deref(), Some("o\n"));
        assert_eq!(next(&mut quote).await.as_deref(), Some("q\n"));
        drop(all);
        // Nobody wants `order` now: its line is not even rendered.
        t.publish(Some("order"), || unreachable!("rendered for nobody"));
        drop(quote);
        assert!(!t.on());
    }

    #[tokio::test]
    async fn a_full_queue_drops_counts_and_says_so() {
        let dropped = Counter::default();
        let t = Arc::new(Tap::new(dropped.clone()));
        let mut s = t.subscribe(None).unwrap();
        for i in 0..QUEUE + 5 {
            t.publish(None, || format!("{i}\n").into_bytes());
        }
        assert_eq!(dropped.get(), 5);
        assert_eq!(next(&mut s).await.as_deref(), Some("{\"dropped\":5}\n"));
        assert_eq!(next(&mut s).await.as_deref(), Some("0\n"));
    }

    #[tokio::test]
    async fn tappers_are_capped_and_end_at_shutdown() {
        let t = tap();
        let held: Vec<Stream> = (0..MAX_TAPPERS)
            .map(|_| t.subscribe(None).unwrap())
            .collect();
        assert_eq!(t.subscribe(None).unwrap_err(), Refused::Full);
        t.publish(None, || "last\n".into());
        t.close();
        assert!(!t.on());
        assert_eq!(t.subscribe(None).unwrap_err(), Refused::Closed);
        for mut s in held {
            assert_eq!(next(&mut s).await.as_deref(), Some("last\n"));
            assert_eq!(next(&mut s).await, None);
        }
    }
}
