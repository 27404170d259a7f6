//! Counts each request on its connection's [`Activity`] from the moment the gRPC service is
//! called until its response body is dropped (a snapshot stream counts for as long as it is
//! open), so [`super::Conn`] knows when a connection has had nothing in flight. A wrapper
//! around the generated service rather than a tower layer: it needs no other crate.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tonic::server::NamedService;
use tower_service::Service;

use super::{ConnInfo, InFlight};

/// `S`, with every request counted on its connection.
#[derive(Debug, Clone)]
pub struct Tracked<S>(pub S);

impl<S: NamedService> NamedService for Tracked<S> {
    const NAME: &'static str = S::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<http::Request<tonic::body::Body>> for Tracked<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<ConnInfo>()
            .map(|info| info.activity.begin());
        let response = self.0.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                tonic::body::Body::new(Counted {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// A response body that holds its request's place until it is dropped.
struct Counted {
    body: tonic::body::Body,
    _guard: Option<InFlight>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
