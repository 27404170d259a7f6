//! A decision carried out on the request and its answer: `RequestHeaderModifier` and
//! `URLRewrite` on the request before it goes to its backend, `ResponseHeaderModifier` on the
//! answer, and a redirect's local reply.
//!
//! Header edits never touch what is the proxy's or the connection's: an `x-hopwise-*` header
//! (the identity, deadlines, marks), `Host` (a rewrite's `hostname` sets it), and the framing
//! and hop-by-hop headers (`content-length`, `transfer-encoding`, `connection`, …); such an
//! edit is skipped. Nothing here decides (that is `decide.rs`'s) or records.

use bytes::Bytes;
use hopwise_model::route::{HeaderModifier, HeaderName as Name};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Uri};
use http::{Response, StatusCode};
use http_body_util::Full;

use super::decide::Forward;
use crate::body::Body;
use crate::error::{LocalReply, ProxyError};

/// The local reply's reason for a redirect (`hopwise_local_replies_total`, the access log).
pub(crate) const REDIRECT: &str = "redirect";

/// The rule's request edits on `req`: its headers, then its URL (`Host`, the path with the
/// query kept). `Err` only when the rewritten path is not a valid URI path.
pub(crate) fn request<B>(req: &mut http::Request<B>, f: &Forward<'_>) -> Result<(), ProxyError> {
    if let Some(m) = f.request_headers {
        edit(req.headers_mut(), m);
    }
    let Some(rewrite) = &f.rewrite else {
        return Ok(());
    };
    let bad = |_| ProxyError::BadPath(hopwise_model::path::PathError::BadPercent);
    let mut parts = req.uri().clone().into_parts();
    if let Some(host) = rewrite.hostname {
        let value = HeaderValue::from_str(host).map_err(|_| ProxyError::NoRoute(host.into()))?;
        req.headers_mut().insert(header::HOST, value);
        if parts.authority.is_some() {
            let authority = Authority::try_from(host).map_err(|_| ProxyError::NoRoute(host.into()));
            parts.authority = Some(authority?);
        }
    }
    if let Some(path) = &rewrite.path {
        let path_and_query = match req.uri().query() {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).map_err(bad)?);
    }
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| ProxyError::Protocol)?;
    Ok(())
}

/// The rule's `ResponseHeaderModifier` on the answer's headers.
pub(crate) fn response(headers: &mut HeaderMap, m: &HeaderModifier) {
    edit(headers, m);
}

/// A redirect answered here: `status` with `location` and an empty body, marked as this
/// proxy's own reply (reason `redirect`).
pub(crate) fn redirect(status: u16, location: &str) -> Result<Response<Body>, ProxyError> {
    let status = StatusCode::from_u16(status).map_err(|_| ProxyError::Protocol)?;
    let location = HeaderValue::from_str(location).map_err(|_| ProxyError::Protocol)?;
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::LOCATION, location);
    resp.extensions_mut().insert(LocalReply(REDIRECT));
    Ok(resp.map(Body::from))
}

/// `set` (replace every value), then `add` (append one), then `remove` (every value).
fn edit(headers: &mut HeaderMap, m: &HeaderModifier) {
    for (name, value) in &m.set {
        if let (Some(n), Ok(v)) = (editable(name), HeaderValue::from_str(value.as_str())) {
            headers.insert(n, v);
        }
    }
    for (name, value) in &m.add {
        if let (Some(n), Ok(v)) = (editable(name), HeaderValue::from_str(value.as_str())) {
            headers.append(n, v);
        }
    }
    for name in &m.remove {
        if let Some(n) = editable(name) {
            headers.remove(n);
        }
    }
}

/// `name` as `http`'s, unless a route may not edit it: the proxy's own, `Host`, the framing
/// headers, and the hop-by-hop ones (`headers.rs`'s list, the one the proxy strips by).
fn editable(name: &Name) -> Option<HeaderName> {
    let n = HeaderName::from_bytes(name.as_str().as_bytes()).ok()?;
    let reserved = n.as_str().starts_with(hopwise_api::names::HEADER_PREFIX)
        || matches!(n.as_str(), "host" | "content-length" | "trailer")
        || crate::headers::is_hop_by_hop(&n);
    (!reserved).then_some(n)
}
