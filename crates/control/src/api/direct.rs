//! `Subscribe`'s response written without tonic's encoder: each snapshot becomes one gRPC
//! message (the 5-byte prefix — uncompressed, length — then the protobuf bytes) in a `Bytes`
//! of exactly its size, handed to hyper and h2 as one data frame and freed once written. The
//! bytes on the wire are the ones tonic's encoder writes (a test decodes them with the
//! generated client); what differs is memory. Tonic's encoder keeps one `BytesMut` per stream
//! that grows to the largest message it encoded — a stream's first, whole, snapshot, tens of
//! KB in a large mesh — and keeps that capacity for the stream's life, though every later
//! message is a delta of a few hundred bytes. Every other call goes to the generated server.
//! This module must not decide anything about a subscription: [`super::streams`] does.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;
use tonic::codec::{Codec, Streaming};
use tonic::server::NamedService;
use tower_service::Service;

use super::{ControlService, streams};
use crate::pb;
use crate::pb::control_server::ControlServer;

/// The path of the one call served here.
const SUBSCRIBE: &str = "/hopwise.control.v1.Control/Subscribe";

/// The largest request message accepted, as tonic's default.
const MAX_REQUEST: usize = 4 * 1024 * 1024;

/// The generated server, with `Subscribe`'s responses written here.
#[derive(Debug, Clone)]
pub struct Direct {
    inner: ControlServer<ControlService>,
    service: ControlService,
}

impl Direct {
    pub fn new(service: ControlService) -> Direct {
        Direct {
            inner: ControlServer::new(service.clone()),
            service,
        }
    }
}

impl NamedService for Direct {
    const NAME: &'static str = <ControlServer<ControlService> as NamedService>::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Service<http::Request<tonic::body::Body>> for Direct {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != SUBSCRIBE {
            return Box::pin(self.inner.call(request));
        }
        let service = self.service.clone();
        Box::pin(async move {
            Ok(match subscribe(&service, request).await {
                Ok(messages) => {
                    let mut response = http::Response::new(tonic::body::Body::new(Messages {
                        messages,
                        ended: false,
                    }));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/grpc"),
                    );
                    response
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// Decodes the request as the generated server does and opens the stream.
async fn subscribe(
    service: &ControlService,
    request: http::Request<tonic::body::Body>,
) -> Result<mpsc::Receiver<Result<pb::Snapshot, Status>>, Status> {
    // No compression is offered, so a compressed request is refused as tonic refuses it.
    if let Some(encoding) = request.headers().get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            encoding.to_str().unwrap_or("?")
        )));
    }
    let (parts, body) = request.into_parts();
    let mut codec = tonic_prost::ProstCodec::<pb::Snapshot, pb::SubscribeRequest>::default();
    let mut body = Streaming::<pb::SubscribeRequest>::new_request(
        codec.decoder(),
        body,
        None,
        Some(MAX_REQUEST),
    );
    let message = body
        .message()
        .await?
        .ok_or_else(|| Status::internal("Missing request message."))?;
    let request = tonic::Request::from_http(http::Request::from_parts(parts, message));
    let stream = streams::subscribe(service, request).await?;
    Ok(stream.into_inner().into_inner())
}

/// A gRPC message: the prefix (not compressed, the length, big-endian) and `message`, in a
/// buffer of exactly that size.
pub(super) fn frame(message: &impl Message) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    let prefix = u32::try_from(len)
        .map_err(|_| Status::resource_exhausted("a snapshot over 4 GiB cannot be sent"))?;
    let mut buf = Vec::with_capacity(5 + len);
    buf.push(0);
    buf.extend_from_slice(&prefix.to_be_bytes());
    message.encode_raw(&mut buf);
    Ok(Bytes::from(buf))
}

/// The trailers that end a stream with `status`.
fn trailers(status: &Status) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    if let Err(unwritable) = status.add_header(&mut map) {
        // A message that is no header value: send the code and the reason it is not sent.
        map.clear();
        let _ = Status::new(status.code(), unwritable.message()).add_header(&mut map);
    }
    map
}

/// The response body: the stream's snapshots, one frame each, then its status as trailers.
struct Messages {
    messages: mpsc::Receiver<Result<pb::Snapshot, Status>>,
    ended: bool,
}

impl Body for Messages {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let end = match std::task::ready!(self.messages.poll_recv(cx)) {
            Some(Ok(message)) => match frame(&message) {
                Ok(bytes) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Err(status) => status,
            },
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        self.ended = true;
        Poll::Ready(Some(Ok(Frame::trailers(trailers(&end)))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests;
