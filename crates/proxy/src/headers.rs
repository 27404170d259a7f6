//! Headers that must not cross a hop, the proxy's own headers, and a request made ready for
//! the next hop: its path made canonical, its destination read, its URI and `Host` rewritten
//! for the pool that carries it. Pure functions over a request's head; no I/O.
//!
//! Connection-specific headers (RFC 9110 §7.6.1) — the fixed list and every name a
//! `Connection` header lists — are dropped from what a proxy forwards, requests and responses
//! alike. They are dropped from the caller's request as it arrives, before the proxy adds its
//! own headers, and `Connection` never removes an `x-hopwise-*` header: those are set and removed
//! by the proxy alone, so nothing a caller or an app sends can take away the identity header the
//! inbound proxy sets, or a deadline or a mark the outbound proxy adds.

use std::borrow::Cow;

use hopwise_model::path::PathError;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Uri, Version};

use crate::error::ProxyError;

/// The header that carries the caller's verified SPIFFE identity to the app.
pub const PEER_IDENTITY: &str = hopwise_api::names::PEER_IDENTITY;
pub(crate) const PEER: HeaderName = HeaderName::from_static(PEER_IDENTITY);

/// The prefix of every header the proxy sets itself.
const OURS: &str = hopwise_api::names::HEADER_PREFIX;

/// A connection-specific header: never forwarded, and never a route's to edit (`route/apply.rs`).
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "transfer-encoding"
            | "upgrade"
            | "te"
    )
}

/// Removes connection-specific headers, which must not be forwarded and which HTTP/2 forbids.
/// `te: trailers` survives: gRPC needs it. A name `Connection` lists is removed too, unless it
/// is one of the proxy's own (`x-hopwise-*`). `pub` for the fuzz target
/// (`fuzz/fuzz_targets/hop_by_hop.rs`), which checks it from outside the crate.
#[doc(hidden)]
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of a hashed removal each.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    // Bytes, not `to_str`: a value with one byte of obs-text (0x80–0xFF, which hyper admits)
    // must still remove the names it lists (found by fuzzing, issue 34).
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .filter(|n| !n.as_str().starts_with(OURS))
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHORIZATION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    if headers
        .get_all(header::TE)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        headers.remove(header::TE);
    }
}

pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Puts the canonical form of the request's path ([`hopwise_model::path`]) in its URI, the
/// query untouched, so what path rules decide on is what the next hop gets.
pub(crate) fn normalize_path<B>(req: &mut Request<B>) -> Result<(), PathError> {
    let fresh = match hopwise_model::path::normalize(req.uri().path())? {
        Cow::Borrowed(_) => return Ok(()),
        Cow::Owned(p) => p,
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{fresh}?{q}"),
        None => fresh,
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query =
        Some(PathAndQuery::try_from(path_and_query).map_err(|_| PathError::BadPercent)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::BadPercent)?;
    Ok(())
}

/// The destination named by an absolute URI (`http_proxy` clients), or `Host`/`:authority`.
pub(crate) fn host_of<B>(req: &Request<B>) -> Option<&str> {
    req.uri().authority().map(|a| a.as_str()).or_else(|| {
        req.headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
    })
}

/// Points the request at `authority`, in the version the chosen pool speaks. The caller's
/// `Host` is kept; for an external service it becomes the service's address. What must not
/// cross a hop was stripped when the request arrived (`strip_hop_by_hop`, before the proxy
/// added its own headers), once for all its tries.
pub(crate) fn rewrite<B>(
    req: Request<B>,
    scheme: Scheme,
    authority: &str,
    h2: bool,
    replace_host: bool,
) -> Result<Request<B>, ProxyError> {
    let (mut parts, body) = req.into_parts();
    let original_host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()));
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let authority: Authority = authority
        .parse()
        .map_err(|_| ProxyError::NoRoute(authority.to_owned()))?;
    parts.uri = Uri::builder()
        .scheme(scheme)
        .authority(authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|_| ProxyError::Protocol)?;
    if h2 {
        parts.version = Version::HTTP_2;
        parts.headers.remove(header::HOST);
    } else {
        parts.version = Version::HTTP_11;
        let host = if replace_host {
            Some(authority.as_str().to_owned())
        } else {
            original_host
        };
        if let Some(h) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
            parts.headers.insert(header::HOST, h);
        }
    }
    Ok(Request::from_parts(parts, body))
}

/// An HTTP/1.1 request for a kept-alive connection to its destination: origin-form (the
/// connection says where), the caller's `Host` kept — from the URI's authority if it sent
/// none (HTTP/2 callers) — or `host` for a service outside the mesh (hop-by-hop headers went
/// when the request arrived). The endpoint's address is never formatted or parsed here.
pub(crate) fn rewrite_h1<B>(req: Request<B>, host: Option<&HeaderValue>) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    if let Some(h) = host {
        parts.headers.insert(header::HOST, h.clone());
    } else if !parts.headers.contains_key(header::HOST)
        && let Some(h) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, h);
    }
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        parts.uri = match parts.uri.path_and_query() {
            Some(p) if p.as_str() != "/" => Uri::from(p.clone()),
            _ => Uri::default(),
        };
    }
    parts.version = Version::HTTP_11;
    Request::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_and_te_trailers_kept() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret").is_none() && h.get("keep-alive").is_none());
        assert_eq!(h[header::TE], "trailers");
        assert_eq!(h["x-kept"], "1");
        h.insert(header::TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut h);
        assert!(h.get(header::TE).is_none());
    }

    #[test]
    fn connection_cannot_name_the_proxys_own_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("X-Hopwise-Peer-Identity, x-hopwise-timeout-ms"),
        );
        h.insert(PEER, HeaderValue::from_static("spiffe://a/service/b"));
        h.insert("x-hopwise-timeout-ms", HeaderValue::from_static("5"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h[PEER], "spiffe://a/service/b");
        assert_eq!(h["x-hopwise-timeout-ms"], "5");
        assert!(h.get(header::CONNECTION).is_none());
    }

    #[test]
    fn a_connection_value_with_obs_text_still_removes_what_it_lists() {
        // The fuzzer's find: `to_str` refused the whole value, so `x-secret` went on.
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_bytes(b"keep\xc9-alive, x-secret").unwrap(),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h["x-kept"], "1");
    }

    const NAMES: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "transfer-encoding",
        "upgrade",
        "te",
        "x-hopwise-peer-identity",
        "x-hopwise-timeout-ms",
        "x-hopwise-attempt",
        "x-app",
        "host",
        "content-type",
    ];

    fn header_set() -> impl Strategy<Value = Vec<(String, String)>> {
        let name = prop_oneof![
            prop::sample::select(NAMES).prop_map(str::to_owned),
            "[a-zA-Z-]{1,12}",
        ];
        let value = prop_oneof![
            "[ -~]{0,20}",
            prop::collection::vec(
                prop_oneof![
                    prop::sample::select(NAMES).prop_map(str::to_owned),
                    "[A-Za-z-]{1,10}"
                ],
                0..5
            )
            .prop_map(|v| v.join(" , ")),
            Just("trailers".to_owned()),
        ];
        prop::collection::vec((name, value), 0..12)
    }

    proptest! {
        /// After stripping no hop-by-hop header is left, no `x-hopwise-*` header is gone, every
        /// other header is either kept or was named by `Connection`; never a panic.
        #[test]
        fn stripping_leaves_no_hop_by_hop_header_and_every_mark(set in header_set()) {
            let mut h = HeaderMap::new();
            for (n, v) in &set {
                if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(n.as_bytes()), HeaderValue::from_str(v)) {
                    h.append(n, v);
                }
            }
            let before = h.clone();
            strip_hop_by_hop(&mut h);
            for name in h.keys() {
                let trailers = name == header::TE
                    && h.get_all(header::TE).iter().all(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
                prop_assert!(!is_hop_by_hop(name) || trailers, "{} left", name);
            }
            for (name, _) in &before {
                if name.as_str().starts_with(OURS) {
                    prop_assert_eq!(
                        before.get_all(name).iter().collect::<Vec<_>>(),
                        h.get_all(name).iter().collect::<Vec<_>>()
                    );
                }
            }
            let mut again = h.clone();
            strip_hop_by_hop(&mut again);
            prop_assert_eq!(again, h);
        }
    }
}
