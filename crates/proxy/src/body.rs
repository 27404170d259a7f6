//! The body of what the proxy answers: the upstream's body streamed through, a local reply, or
//! an upstream gRPC body the proxy read ahead to its trailers (to see its `grpc-status` before
//! deciding on a retry) and now hands on — the frames it read, then the rest; or any of these
//! watched for its gRPC trailers on the way out (`watch.rs`), so a recorded span gets its status.

mod watch;
pub use watch::Watch;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug)]
pub enum Body {
    Upstream(Incoming),
    Local(Full<Bytes>),
    Peeked {
        frames: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        rest: Option<Incoming>,
    },
    Watched(Box<Watch>),
}

impl Body {
    pub fn local(bytes: impl Into<Bytes>) -> Body {
        Body::Local(Full::new(bytes.into()))
    }
}

impl From<Full<Bytes>> for Body {
    fn from(f: Full<Bytes>) -> Body {
        Body::Local(f)
    }
}

/// What reading ahead found.
#[derive(Debug)]
pub struct Peek {
    pub body: Body,
    /// The trailers, if they arrived within the limit.
    pub trailers: Option<HeaderMap>,
}

/// Frames that follow each other this closely are one burst (a unary answer's message and its
/// trailers, which a busy machine may still deliver milliseconds apart); a longer gap means a
/// stream, and reading ahead stops. So a server stream's first message is held back at most
/// this long, and only on routes that retry gRPC statuses of calls safe to repeat.
const BURST_GAP: Duration = Duration::from_millis(100);

/// Reads `body` until its trailers, its end, `limit` bytes, or a pause in the frames —
/// whichever comes first — and returns a body that replays what was read and streams the rest.
/// The first frame is awaited at most `first` (the time the try has left).
pub async fn peek(
    mut body: Incoming,
    limit: usize,
    first: Option<Duration>,
) -> Result<Peek, hyper::Error> {
    let mut frames = VecDeque::new();
    let mut read = 0usize;
    loop {
        let wait = if frames.is_empty() {
            first
        } else {
            Some(BURST_GAP)
        };
        let next = match wait {
            Some(w) => match tokio::time::timeout(w, body.frame()).await {
                Ok(next) => next,
                // A pause: what came is replayed, the rest streams.
                Err(_) => return Ok(Peek::of(frames, None, Some(body))),
            },
            None => body.frame().await,
        };
        match next {
            None => return Ok(Peek::of(frames, None, None)),
            Some(Err(e)) => return Err(e),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    read += data.len();
                    frames.push_back(data);
                    if read > limit {
                        return Ok(Peek::of(frames, None, Some(body)));
                    }
                }
                Err(frame) => return Ok(Peek::of(frames, frame.into_trailers().ok(), None)),
            },
        }
    }
}

impl Peek {
    /// What was read (`frames`, the `trailers` if they came) and what is left to stream.
    fn of(frames: VecDeque<Bytes>, trailers: Option<HeaderMap>, rest: Option<Incoming>) -> Peek {
        Peek {
            body: Body::Peeked {
                frames,
                trailers: trailers.clone(),
                rest,
            },
            trailers,
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Body::Upstream(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            Body::Local(b) => Pin::new(b).poll_frame(cx).map_err(|never| match never {}),
            Body::Watched(w) => {
                let polled = Pin::new(&mut w.inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => w.saw(frame),
                    Poll::Ready(None) => w.end(None),
                    _ => {}
                }
                polled
            }
            Body::Peeked {
                frames,
                trailers,
                rest,
            } => {
                if let Some(data) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                match rest {
                    Some(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
                    None => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Upstream(b) => b.is_end_stream(),
            Body::Local(b) => b.is_end_stream(),
            Body::Watched(w) => w.inner.is_end_stream(),
            Body::Peeked {
                frames,
                trailers,
                rest,
            } => {
                frames.is_empty()
                    && trailers.is_none()
                    && rest.as_ref().is_none_or(|r| r.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Upstream(b) => b.size_hint(),
            Body::Local(b) => b.size_hint(),
            Body::Watched(w) => w.inner.size_hint(),
            Body::Peeked { .. } => SizeHint::default(),
        }
    }
}
