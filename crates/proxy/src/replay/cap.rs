//! A stranger's request body, bounded while it streams (a gateway's front door, docs/routes.md
//! "Gateway"): at most `max` bytes however it is framed — a chunked body declares no length,
//! so the `Content-Length` check alone lets any size through — and never more than `idle`
//! without a frame, so a client that sends its head and then trickles or stops holds no
//! connection to the mesh for longer. Either ends the body with [`BodyRefused`], which the
//! try's error carries to [`crate::upstream::classify`]: 413 or 408 for the client when no
//! answer has begun.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::BoxError;

/// The bounds a gateway puts on a request's body (a request extension the front door sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyCap {
    pub max: u64,
    pub idle: Duration,
}

/// Why a capped body ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefused {
    #[error("the request's body is larger than {0} bytes")]
    TooLarge(u64),
    #[error("the request's body stalled: nothing arrived for {0:?}")]
    Stalled(Duration),
}

/// `body` under `cap`.
#[derive(Debug)]
pub struct Capped<B> {
    body: B,
    cap: BodyCap,
    seen: u64,
    /// When the body stalls if nothing comes; moved on by every frame.
    deadline: Instant,
    /// Armed while the body waits (made once, then reset to the deadline).
    timer: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl<B> Capped<B> {
    pub fn new(body: B, cap: BodyCap) -> Capped<B> {
        Capped {
            body,
            cap,
            seen: 0,
            deadline: Instant::now() + cap.idle,
            timer: None,
            ended: false,
        }
    }

    fn refuse(&mut self, why: BodyRefused) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.ended = true;
        self.timer = None;
        Poll::Ready(Some(Err(Box::new(why))))
    }
}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => this.refuse(BodyRefused::Stalled(this.cap.idle)),
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.deadline = Instant::now() + this.cap.idle;
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if this.seen > this.cap.max {
                        return this.refuse(BodyRefused::TooLarge(this.cap.max));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.ended = true;
                this.timer = None;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
