//! A gRPC probe as the kubelet runs it: `grpc.health.v1.Health/Check` for a service name over
//! HTTP/2 without TLS (h2c), passed when the answer is `SERVING`. The two messages of the
//! standard health protocol are written here with prost rather than generated: one field each.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;

const PATH: &str = "/grpc.health.v1.Health/Check";
/// More than a health answer ever is.
const MAX_ANSWER: usize = 16 * 1024;

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    /// 0 unknown, 1 serving, 2 not serving, 3 service unknown.
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `Ok` when the server at `tcp` says `service` is serving; else why not.
pub(super) async fn check(tcp: Result<TcpStream, String>, service: &str) -> Result<(), String> {
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp?))
            .await
            .map_err(|e| format!("HTTP/2 to the app: {e}"))?;
    let message = HealthCheckRequest {
        service: service.to_owned(),
    }
    .encode_to_vec();
    let mut body = BytesMut::with_capacity(5 + message.len());
    body.put_u8(0);
    body.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    body.put_slice(&message);
    let req = Request::post(PATH)
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        )
        .header(header::TE, HeaderValue::from_static("trailers"))
        .header(
            header::USER_AGENT,
            HeaderValue::from_static("hopwise-probe"),
        )
        .body(Full::new(body.freeze()))
        .map_err(|e| e.to_string())?;
    let asked = async {
        let answer = sender
            .send_request(req)
            .await
            .map_err(|e| format!("the health check: {e}"))?;
        let (head, body) = answer.into_parts();
        let body = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("the health check's answer: {e}"))?;
        // The status is in the trailers, or in the head of a trailers-only answer.
        let trailers = body.trailers().cloned().unwrap_or_default();
        let status = trailers
            .get("grpc-status")
            .or_else(|| head.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        if status != "0" {
            return Err(format!("the health check failed: grpc-status {status}"));
        }
        serving(&body.to_bytes())
    };
    // As for HTTP/1.1 (`send`): the connection may end before the answer is taken.
    tokio::pin!(asked);
    tokio::select! {
        asked = &mut asked => asked,
        ended = conn => match ended {
            Ok(()) => asked.await,
            Err(e) => Err(format!("HTTP/2 to the app: {e}")),
        },
    }
}

/// The one message of a health answer, `SERVING` or why not.
fn serving(body: &Bytes) -> Result<(), String> {
    let message = body
        .get(5..)
        .filter(|_| body.len() >= 5 && body[0] == 0)
        .ok_or("the health check's answer is no uncompressed gRPC message")?;
    let answer = HealthCheckResponse::decode(message)
        .map_err(|e| format!("the health check's answer: {e}"))?;
    match answer.status {
        1 => Ok(()),
        2 => Err("NOT_SERVING".to_owned()),
        3 => Err("SERVICE_UNKNOWN".to_owned()),
        other => Err(format!("status {other}, not SERVING")),
    }
}
