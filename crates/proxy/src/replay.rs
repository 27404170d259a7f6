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

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

#[derive(Debug)]
struct Shared {
    source: Option<Incoming>,
    /// Copies of what was pulled so far, in order (empty once `overflowed`).
    frames: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    kept: usize,
    limit: usize,
    /// The source has ended.
    done: bool,
    overflowed: bool,
    /// Something was pulled from the source.
    started: bool,
    /// The newest try; only it may pull from the source.
    current: u32,
}

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
        let hint = body.size_hint();
        let empty = body.is_end_stream();
        Replay {
            shared: Arc::new(Mutex::new(Shared {
                source: Some(body),
                frames: Vec::new(),
                trailers: None,
                kept: 0,
                limit,
                done: empty,
                overflowed: hint.lower() > limit as u64,
                started: false,
                current: 0,
            })),
            hint,
            empty,
        }
    }

    /// Can another try send this body in full?
    pub fn can_replay(&self) -> bool {
        let s = lock(&self.shared);
        !s.overflowed || !s.started
    }

    /// Has the caller finished sending the body? (A stream still open means a streaming call,
    /// whose answer must not be held back.)
    pub fn complete(&self) -> bool {
        lock(&self.shared).done
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
            let frame = match Pin::new(source).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    s.done = true;
                    s.source = None;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(Box::new(e)))),
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
                s.done && self.pos >= s.frames.len() && (s.trailers.is_none() || self.trailers_sent)
            }
            None => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
