//! A request body that can be sent again.
//!
//! Every try gets a [`ReplayBody`] over the same shared state. The first try that polls pulls
//! frames from the downstream body, forwarding each as it arrives (nothing waits for the whole
//! body — gRPC streams keep streaming) and keeping a copy (a cheap `Bytes` clone) while the total
//! stays under the limit. A later try replays the copies, then continues pulling where the
//! earlier one stopped. Once the body outgrows the limit the copies are dropped and no further
//! try can be made — the body is streamed, not retried, as Envoy and Linkerd do.
//!
//! A try whose connection failed before it polled anything leaves the source untouched, so
//! connection failures can be retried for any body size.
//!
//! A mirror ([`crate::mirror`]) reads a *follower* body: the copies as the tries pull them,
//! never the source itself, so it cannot slow or take anything from the request. It waits for
//! the tries to pull; if the body outgrows the limit, the follower fails and the mirror ends.

mod cap;

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

pub use cap::{BodyCap, BodyRefused};

/// Where the tries pull from: the caller's body as it comes, or a stranger's under a gateway's
/// bounds ([`cap`]).
#[derive(Debug)]
enum Source {
    Plain(Incoming),
    // Boxed: a gateway's bounds (a timer among them) must not grow the shared state every
    // request allocates.
    Capped(Box<cap::Capped<Incoming>>),
}

impl Source {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self {
            Source::Plain(b) => match Pin::new(b).poll_frame(cx) {
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
                Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            Source::Capped(b) => Pin::new(b.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Source::Plain(b) => b.is_end_stream(),
            Source::Capped(b) => b.is_end_stream(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    source: Option<Source>,
    /// Copies of what was pulled so far, in order (empty once `overflowed`).
    frames: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    kept: usize,
    /// What is kept at most (for the tries, and a follower).
    limit: usize,
    /// What the tries may replay at most: a follower may need more kept than they may resend.
    retry_limit: usize,
    /// The source has ended.
    done: bool,
    overflowed: bool,
    /// Something was pulled from the source.
    started: bool,
    /// The newest try; only it may pull from the source.
    current: u32,
    /// A follower waiting for the tries to pull more.
    follower: Option<Waker>,
    /// The source failed: the body will never be whole.
    failed: bool,
}

impl Shared {
    /// Something a follower waits for happened: a frame kept, the end, or the copies dropped.
    fn wake_follower(&mut self) {
        if let Some(w) = self.follower.take() {
            w.wake();
        }
    }
}

/// The attempt number of a follower body (tries count from 1).
const FOLLOWER: u32 = 0;

/// The handle that makes a body for each try.
#[derive(Debug, Clone)]
pub struct Replay {
    shared: Arc<Mutex<Shared>>,
    hint: SizeHint,
    empty: bool,
}

/// One try's request body.
#[derive(Debug)]
pub struct ReplayBody {
    shared: Option<Arc<Mutex<Shared>>>,
    attempt: u32,
    /// How many kept frames this try has sent.
    pos: usize,
    trailers_sent: bool,
    hint: SizeHint,
    empty: bool,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Replay {
    /// Wraps a downstream body, keeping up to `limit` bytes for replay.
    pub fn new(body: Incoming, limit: usize) -> Replay {
        Replay::keeping(body, limit, limit)
    }

    /// As [`Replay::new`], keeping up to `keep` bytes for a follower while the tries may resend
    /// at most `retry_limit` (their policy's bound, which a mirror must not widen).
    pub fn keeping(body: Incoming, retry_limit: usize, keep: usize) -> Replay {
        Replay::from_source(body, None, retry_limit, keep)
    }

    /// As [`Replay::keeping`], the body bounded by `cap` as it streams (a gateway's).
    pub fn capped(body: Incoming, cap: BodyCap, retry_limit: usize, keep: usize) -> Replay {
        Replay::from_source(body, Some(cap), retry_limit, keep)
    }

    fn from_source(
        body: Incoming,
        cap: Option<BodyCap>,
        retry_limit: usize,
        keep: usize,
    ) -> Replay {
        let limit = keep.max(retry_limit);
        let hint = body.size_hint();
        let empty = body.is_end_stream();
        let source = match cap {
            Some(cap) => Source::Capped(Box::new(cap::Capped::new(body, cap))),
            None => Source::Plain(body),
        };
        Replay {
            shared: Arc::new(Mutex::new(Shared {
                source: Some(source),
                frames: Vec::new(),
                trailers: None,
                kept: 0,
                limit,
                retry_limit,
                done: empty,
                overflowed: hint.lower() > limit as u64,
                started: false,
                current: 0,
                follower: None,
                failed: false,
            })),
            hint,
            empty,
        }
    }

    /// Can another try send this body in full?
    pub fn can_replay(&self) -> bool {
        let s = lock(&self.shared);
        !s.started || (!s.overflowed && s.kept <= s.retry_limit)
    }

    /// Has the caller finished sending the body? (A stream still open means a streaming call,
    /// whose answer must not be held back.)
    pub fn complete(&self) -> bool {
        lock(&self.shared).done
    }

    /// A body that follows the tries: every frame they pull, once they pull it; an error if
    /// the body outgrows the limit (its copies are gone). For a mirror of the request.
    pub fn follower(&self) -> ReplayBody {
        ReplayBody {
            shared: Some(self.shared.clone()),
            attempt: FOLLOWER,
            pos: 0,
            trailers_sent: false,
            hint: self.hint,
            empty: self.empty,
        }
    }

    /// The body for try `attempt` (1-based, increasing).
    pub fn body(&self, attempt: u32) -> ReplayBody {
        lock(&self.shared).current = attempt;
        ReplayBody {
            shared: Some(self.shared.clone()),
            attempt,
            pos: 0,
            trailers_sent: false,
            hint: self.hint,
            empty: self.empty,
        }
    }
}

impl ReplayBody {
    /// A body with nothing to replay, for forwarding without retries (inbound to the app).
    pub fn passthrough(body: Incoming) -> ReplayBody {
        Replay::new(body, 0).body(1)
    }

    /// No body (tests, which have no `Incoming` to make one from).
    #[cfg(test)]
    pub(crate) fn empty() -> ReplayBody {
        ReplayBody {
            shared: None,
            attempt: 1,
            pos: 0,
            trailers_sent: false,
            hint: SizeHint::with_exact(0),
            empty: true,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A follower's next frame: a copy the tries kept, the end once they reached it, or a wait.
fn follow(
    pos: &mut usize,
    trailers_sent: &mut bool,
    s: &mut Shared,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    // Copies not kept (the body outgrew the limit, even before it started) or a broken source:
    // a follower never sends part of a body as if it were all of it.
    if s.overflowed || s.failed {
        return Poll::Ready(Some(Err(Box::new(Superseded))));
    }
    if let Some(frame) = s.frames.get(*pos) {
        *pos += 1;
        return Poll::Ready(Some(Ok(Frame::data(frame.clone()))));
    }
    if s.done {
        if !*trailers_sent && let Some(t) = s.trailers.clone() {
            *trailers_sent = true;
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        return Poll::Ready(None);
    }
    s.follower = Some(cx.waker().clone());
    Poll::Pending
}

/// The body of an earlier try was polled after a newer try took over; it is dead anyway.
#[derive(Debug, thiserror::Error)]
#[error("request body superseded by a newer try, or no longer replayable")]
pub struct Superseded;

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(shared) = this.shared.as_ref() else {
            return Poll::Ready(None);
        };
        let mut s = lock(shared);
        if this.attempt == FOLLOWER {
            return follow(&mut this.pos, &mut this.trailers_sent, &mut s, cx);
        }
        if s.current != this.attempt {
            return Poll::Ready(Some(Err(Box::new(Superseded))));
        }
        // First the copies an earlier try already sent.
        if this.pos < s.frames.len() {
            let frame = s.frames[this.pos].clone();
            this.pos += 1;
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if s.started && s.overflowed && this.pos == 0 && this.attempt > 1 {
            return Poll::Ready(Some(Err(Box::new(Superseded))));
        }
        if s.done {
            if !this.trailers_sent
                && let Some(t) = s.trailers.clone()
            {
                this.trailers_sent = true;
                return Poll::Ready(Some(Ok(Frame::trailers(t))));
            }
            return Poll::Ready(None);
        }
        loop {
            let Some(source) = s.source.as_mut() else {
                return Poll::Ready(None);
            };
            let frame = match source.poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    s.done = true;
                    s.source = None;
                    s.wake_follower();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    // The follower cannot have the whole body either.
                    s.failed = true;
                    s.wake_follower();
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            // An empty data frame carries nothing; passing it on costs the next hop one of the
            // few empty frames HTTP/2 peers tolerate per connection (h2 sends GOAWAY at 100).
            if frame.data_ref().is_some_and(|d| d.is_empty()) {
                continue;
            }
            if s.source.as_ref().is_some_and(|b| b.is_end_stream()) {
                s.done = true;
            }
            return {
                s.started = true;
                if let Some(data) = frame.data_ref() {
                    if !s.overflowed && s.kept + data.len() <= s.limit {
                        s.kept += data.len();
                        s.frames.push(data.clone());
                        this.pos = s.frames.len();
                    } else if !s.overflowed {
                        s.overflowed = true;
                        s.frames.clear();
                        s.kept = 0;
                        this.pos = 0;
                    }
                } else if let Some(t) = frame.trailers_ref() {
                    s.trailers = Some(t.clone());
                    this.trailers_sent = true;
                }
                s.wake_follower();
                Poll::Ready(Some(Ok(frame)))
            };
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.empty {
            return true;
        }
        match self.shared.as_ref() {
            Some(shared) => {
                let s = lock(shared);
                // A follower whose copies are gone is not at its end: polled, it fails, so a
                // copy is reset rather than sent short as if whole.
                if self.attempt == FOLLOWER && (s.overflowed || s.failed) {
                    return false;
                }
                s.done && self.pos >= s.frames.len() && (s.trailers.is_none() || self.trailers_sent)
            }
            None => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
