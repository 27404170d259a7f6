//! A body watched on its way out for its trailers: what [`crate::recorded`] uses so a gRPC
//! answer whose status comes in trailers closes its span with that status (the OpenTelemetry
//! conventions' `rpc.grpc.status_code`, on success too) rather than with the head's bare 200.
//! Knows nothing of spans: it hands the trailers (or `None`, at an end or a drop without them)
//! to the function it was given, once. One check per frame, and only on a recorded answer.

use std::fmt;

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;

use super::Body;

/// What to do with the trailers, once.
type OnEnd = Box<dyn FnOnce(Option<&HeaderMap>) + Send>;

/// The body and what waits for its trailers.
pub struct Watch {
    pub(super) inner: Body,
    on_end: Option<OnEnd>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").field("inner", &self.inner).finish()
    }
}

impl Watch {
    /// `inner`, whose trailers go to `on_end` when they pass (or `None` when it ends, or is
    /// dropped, without them).
    pub fn new(inner: Body, on_end: impl FnOnce(Option<&HeaderMap>) + Send + 'static) -> Watch {
        Watch {
            inner,
            on_end: Some(Box::new(on_end)),
        }
    }

    /// A frame went out: trailers end the watch.
    pub(super) fn saw(&mut self, frame: &Frame<Bytes>) {
        if let Some(t) = frame.trailers_ref() {
            self.end(Some(t));
        }
    }

    /// The watch ends, with the trailers if they came (once).
    pub(super) fn end(&mut self, trailers: Option<&HeaderMap>) {
        if let Some(f) = self.on_end.take() {
            f(trailers);
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.end(None);
    }
}
