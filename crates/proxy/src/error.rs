//! The one place where a failure to forward becomes a response.
//!
//! Every local reply names its reason in `x-hopwise-error`, so a caller (or a test) can tell a
//! refused connection from a timeout from a missing route without reading logs. gRPC callers get
//! a trailers-only response: HTTP 200 with `grpc-status` and `grpc-message`, as gRPC requires.

use bytes::Bytes;
use hopwise_model::fault::Answer;
use hopwise_model::{GrpcCode, Outcome};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

use crate::body::Body;

/// Parsed once: a `&str` name is validated and lower-cased again on every lookup.
pub(crate) const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

/// `x-hopwise-error` on a local reply, as a name made once (the reply writes it; the access log
/// and the span read it).
pub const ERROR_HEADER: http::HeaderName = http::HeaderName::from_static(hopwise_api::names::ERROR);
/// Names the cap that refused a request.
pub const LIMIT_HEADER: &str = hopwise_api::names::LIMIT;

/// Why the proxy answered itself instead of forwarding the upstream's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("no route to `{0}` from this proxy")]
    NoRoute(String),
    #[error("{0} has no running copy")]
    NoEndpoint(String),
    #[error("this service is called on no port {0} (`ports` in the mesh file)")]
    NoPort(u16),
    #[error("the upstream refused the connection")]
    ConnectRefused,
    #[error("the connection to the upstream timed out")]
    ConnectTimeout,
    #[error("the upstream's TLS handshake failed: {0}")]
    Tls(String),
    #[error("the upstream reset the connection")]
    Reset,
    #[error("the upstream did not answer within the per-try timeout")]
    PerTryTimeout,
    #[error("the upstream did not answer within the route timeout")]
    RouteTimeout,
    #[error("the upstream's response was not valid HTTP")]
    Protocol,
    #[error("the caller {0} is not allowed to call this service")]
    Forbidden(String),
    #[error("the caller's certificate names no identity: {0}")]
    NoIdentity(String),
    #[error("the request's path cannot be made canonical: {0}")]
    BadPath(hopwise_model::path::PathError),
    #[error("{0} is reached for this service's app: failing fast instead of queueing")]
    InboundOverflow(&'static str),
    #[error("the app did not answer within the inbound timeout")]
    AppTimeout,
    #[error("the proxy is shutting down")]
    Draining,
    #[error("the caller's deadline has passed")]
    DeadlineExceeded,
    #[error("{0} is reached for this upstream: failing fast instead of queueing")]
    Overflow(&'static str),
    #[error("the upstream closed the connection before the request was sent")]
    ResetBeforeRequest,
    #[error(
        "CONNECT is not carried to this service: its mesh file entry needs `upgrade: {{ connect: true }}`"
    )]
    ConnectMethod,
    #[error("this protocol switch is not carried: {0}")]
    UpgradeUnsupported(&'static str),
    #[error("the request this call was made for has ended: its caller went away")]
    CallerGone,
    #[error("route `{0}` sends the request nowhere: no backend of its rule has weight")]
    NoBackend(String),
    #[error("a fault injected by this service's `fault` (docs/config.md)")]
    Fault(hopwise_model::fault::Answer),
    #[error("the request's body is larger than {0} bytes, the most this gateway takes")]
    BodyTooLarge(u64),
    #[error("the request's body stalled: nothing arrived for {0} s, the most this gateway waits")]
    BodyTimeout(u64),
    #[error("{limit} is reached for this service: try again in {retry_after_secs}s")]
    RateLimited {
        limit: &'static str,
        retry_after_secs: u64,
    },
}

impl ProxyError {
    /// The short reason sent in `x-hopwise-error` and used as a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::NoRoute(_) => "no-route",
            ProxyError::NoEndpoint(_) => "no-endpoint",
            ProxyError::NoPort(_) => "no-port",
            ProxyError::ConnectRefused => "connect-refused",
            ProxyError::ConnectTimeout => "connect-timeout",
            ProxyError::Tls(_) => "tls",
            ProxyError::Reset => "reset",
            ProxyError::PerTryTimeout => "per-try-timeout",
            ProxyError::RouteTimeout => "route-timeout",
            ProxyError::Protocol => "protocol",
            ProxyError::Forbidden(_) => "forbidden",
            ProxyError::NoIdentity(_) => "no-identity",
            ProxyError::BadPath(_) => "bad-path",
            ProxyError::InboundOverflow(_) => "overflow",
            ProxyError::AppTimeout => "app-timeout",
            ProxyError::Draining => "draining",
            ProxyError::DeadlineExceeded => "deadline-exceeded",
            ProxyError::Overflow(_) => "overflow",
            ProxyError::ResetBeforeRequest => "reset-before-request",
            ProxyError::ConnectMethod => "connect-unsupported",
            ProxyError::UpgradeUnsupported(_) => "upgrade-unsupported",
            ProxyError::CallerGone => "caller-gone",
            ProxyError::NoBackend(_) => "no-backend",
            ProxyError::RateLimited { .. } => "rate-limited",
            ProxyError::BodyTooLarge(_) => "body-too-large",
            ProxyError::BodyTimeout(_) => "body-timeout",
            ProxyError::Fault(_) => "fault",
        }
    }

    /// The try's outcome, in the vocabulary retry conditions are written in.
    pub fn outcome(&self) -> Outcome {
        match self {
            ProxyError::ConnectRefused
            | ProxyError::ConnectTimeout
            | ProxyError::Tls(_)
            | ProxyError::NoEndpoint(_) => Outcome::ConnectFailure,
            ProxyError::ResetBeforeRequest => Outcome::ResetBeforeRequest,
            ProxyError::Reset | ProxyError::Protocol => Outcome::Reset,
            ProxyError::PerTryTimeout
            | ProxyError::RouteTimeout
            | ProxyError::DeadlineExceeded
            | ProxyError::AppTimeout => Outcome::Timeout,
            ProxyError::NoRoute(_)
            | ProxyError::NoPort(_)
            | ProxyError::Forbidden(_)
            | ProxyError::NoIdentity(_)
            | ProxyError::BadPath(_)
            | ProxyError::InboundOverflow(_)
            | ProxyError::Draining
            | ProxyError::ConnectMethod
            | ProxyError::UpgradeUnsupported(_)
            | ProxyError::CallerGone
            | ProxyError::NoBackend(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::BodyTooLarge(_)
            | ProxyError::BodyTimeout(_)
            | ProxyError::Overflow(_) => Outcome::http(self.status().as_u16()),
            ProxyError::Fault(Answer::Http(s)) => Outcome::http(*s),
            ProxyError::Fault(Answer::Grpc(c)) => Outcome::grpc(*c),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute(_) | ProxyError::NoPort(_) => StatusCode::NOT_FOUND,
            // The Gateway API's answer when a rule's weights are all 0 or it has no backend.
            ProxyError::NoBackend(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::ConnectMethod => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::UpgradeUnsupported(_) => StatusCode::NOT_IMPLEMENTED,
            ProxyError::Forbidden(_) | ProxyError::NoIdentity(_) => StatusCode::FORBIDDEN,
            ProxyError::BadPath(_) => StatusCode::BAD_REQUEST,
            ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            // 200–599, checked when the mesh was read; a gRPC code answered as HTTP: 503.
            ProxyError::Fault(Answer::Http(s)) => {
                StatusCode::from_u16(*s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
            ProxyError::Fault(Answer::Grpc(_)) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::PerTryTimeout
            | ProxyError::RouteTimeout
            | ProxyError::DeadlineExceeded
            | ProxyError::AppTimeout => StatusCode::GATEWAY_TIMEOUT,
            // A handshake that failed is a connect failure (docs/config.md's give-up table):
            // nothing reached the upstream's app.
            // An answer that was not HTTP ends the try as a reset does (`outcome`), and is
            // answered as one, as `check` assumes: 503, not 502.
            ProxyError::NoEndpoint(_)
            | ProxyError::Protocol
            | ProxyError::ConnectRefused
            | ProxyError::ConnectTimeout
            | ProxyError::Tls(_)
            | ProxyError::Reset
            | ProxyError::ResetBeforeRequest
            | ProxyError::Overflow(_)
            | ProxyError::InboundOverflow(_)
            | ProxyError::CallerGone
            | ProxyError::Draining => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The gRPC status for the same failure. Our own timeouts are DEADLINE_EXCEEDED (as
    /// Linkerd answers), failures to reach the upstream UNAVAILABLE.
    pub fn grpc_code(&self, on_timeout: GrpcCode) -> u8 {
        match self {
            ProxyError::NoRoute(_) | ProxyError::NoPort(_) => 12, // UNIMPLEMENTED
            ProxyError::Forbidden(_) => 7,                        // PERMISSION_DENIED
            ProxyError::NoIdentity(_) => 16,                      // UNAUTHENTICATED
            ProxyError::BadPath(_) => 3,                          // INVALID_ARGUMENT
            ProxyError::AppTimeout => GrpcCode::DeadlineExceeded.number(),
            ProxyError::PerTryTimeout | ProxyError::RouteTimeout => on_timeout.number(),
            ProxyError::DeadlineExceeded | ProxyError::BodyTimeout(_) => {
                GrpcCode::DeadlineExceeded.number()
            }
            ProxyError::Overflow(_)
            | ProxyError::InboundOverflow(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::BodyTooLarge(_) => GrpcCode::ResourceExhausted.number(),
            ProxyError::CallerGone => GrpcCode::Cancelled.number(),
            ProxyError::Fault(Answer::Grpc(c)) => c.number(),
            _ => GrpcCode::Unavailable.number(),
        }
    }

    /// The local reply. `grpc` selects the trailers-only gRPC form.
    pub fn response(&self, grpc: bool, on_timeout: GrpcCode) -> Response<Full<Bytes>> {
        let reason = HeaderValue::from_static(self.reason());
        let message = self.to_string();
        let mut resp = if grpc {
            let mut r = Response::new(Full::new(Bytes::new()));
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc"),
            );
            h.insert(
                GRPC_STATUS,
                HeaderValue::from(u16::from(self.grpc_code(on_timeout))),
            );
            if let Ok(v) = HeaderValue::from_str(&percent_encode(&message)) {
                h.insert("grpc-message", v);
            }
            r
        } else {
            let mut r = Response::new(Full::new(Bytes::from(message + "\n")));
            *r.status_mut() = self.status();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        };
        resp.headers_mut().insert(ERROR_HEADER, reason);
        resp.extensions_mut().insert(LocalReply(self.reason()));
        if let ProxyError::Overflow(limit) | ProxyError::InboundOverflow(limit) = self {
            resp.headers_mut()
                .insert(LIMIT_HEADER, HeaderValue::from_static(limit));
        }
        if let ProxyError::RateLimited {
            limit,
            retry_after_secs,
        } = self
        {
            let h = resp.headers_mut();
            h.insert(LIMIT_HEADER, HeaderValue::from_static(limit));
            h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        resp
    }
}

/// Marks an answer this proxy made itself, with its reason. An extension, not a header: it
/// never crosses the wire, so an app's or a peer's `x-hopwise-error` cannot pass for it in the
/// access log, a span or the tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalReply(pub &'static str);

impl LocalReply {
    /// The reason, if `resp` is a reply of this proxy's own.
    pub fn of<B>(resp: &http::Response<B>) -> Option<&'static str> {
        resp.extensions().get::<LocalReply>().map(|r| r.0)
    }
}

/// `err` as the answer to a request: the local reply in the body the proxy answers with.
pub(crate) fn local(err: ProxyError, grpc: bool, on_timeout: GrpcCode) -> Response<Body> {
    err.response(grpc, on_timeout).map(Body::from)
}

/// gRPC's `grpc-message` encoding: percent-encode everything outside printable ASCII and `%`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_replies_carry_status_and_reason() {
        let r = ProxyError::ConnectRefused.response(false, GrpcCode::DeadlineExceeded);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[&ERROR_HEADER], "connect-refused");
        let r = ProxyError::RouteTimeout.response(false, GrpcCode::DeadlineExceeded);
        assert_eq!(r.status(), 504);
        // A failed handshake is a connect failure: the give-up table's 503 (UNAVAILABLE).
        let tls = ProxyError::Tls("invalid peer certificate".into());
        let r = tls.response(false, GrpcCode::DeadlineExceeded);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[&ERROR_HEADER], "tls");
        assert_eq!(tls.outcome(), Outcome::ConnectFailure);
        assert_eq!(tls.grpc_code(GrpcCode::DeadlineExceeded), 14);
    }

    /// Every way a try can fail is answered, when the proxy gives up on it, as `check` and
    /// docs/config.md's give-up table say (`Policy::give_up_answer` on its outcome): what the
    /// proxy above sees decides whether retries multiply down a chain.
    #[test]
    fn a_failed_try_is_answered_as_the_give_up_table_says() {
        use hopwise_model::{Outcome, Preset, Protocol};
        let failures = [
            ProxyError::NoEndpoint("b".into()),
            ProxyError::ConnectRefused,
            ProxyError::ConnectTimeout,
            ProxyError::Tls("bad".into()),
            ProxyError::Reset,
            ProxyError::ResetBeforeRequest,
            ProxyError::Protocol,
            ProxyError::PerTryTimeout,
            ProxyError::RouteTimeout,
        ];
        for preset in [Preset::Hopwise, Preset::Istio, Preset::Envoy] {
            let p = preset.policy();
            let on_timeout = p.grpc_status_on_timeout;
            for e in &failures {
                let http = p.give_up_answer(e.outcome(), Protocol::Http);
                assert_eq!(http, Outcome::http(e.status().as_u16()), "{e:?} {preset:?}");
                let Outcome::Response {
                    grpc: Some(code), ..
                } = p.give_up_answer(e.outcome(), Protocol::Grpc)
                else {
                    panic!("{e:?}: no gRPC status");
                };
                assert_eq!(code.number(), e.grpc_code(on_timeout), "{e:?} {preset:?}");
            }
        }
    }

    #[test]
    fn grpc_replies_are_trailers_only() {
        let r = ProxyError::RouteTimeout.response(true, GrpcCode::DeadlineExceeded);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "4");
        let r = ProxyError::ConnectRefused.response(true, GrpcCode::DeadlineExceeded);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/grpc");
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("a b%c→"), "a b%25c%E2%86%92");
    }
}
