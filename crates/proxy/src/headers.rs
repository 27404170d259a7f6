//! Headers that must not cross a hop, and the proxy's own headers.
//!
//! Connection-specific headers (RFC 9110 §7.6.1) — the fixed list and every name a
//! `Connection` header lists — are dropped from what a proxy forwards, requests and responses
//! alike. They are dropped from the caller's request as it arrives, before the proxy adds its
//! own headers, and `Connection` never removes an `x-hopwise-*` header: those are set and removed
//! by the proxy alone, so nothing a caller or an app sends can take away the identity header the
//! inbound proxy sets, or a deadline or a mark the outbound proxy adds.

use http::header::{self, HeaderMap, HeaderName};

/// The header that carries the caller's verified SPIFFE identity to the app.
pub const PEER_IDENTITY: &str = "x-hopwise-peer-identity";
pub(crate) const PEER: HeaderName = HeaderName::from_static(PEER_IDENTITY);

/// The prefix of every header the proxy sets itself.
const OURS: &str = "x-hopwise-";

fn is_hop_by_hop(name: &HeaderName) -> bool {
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
/// is one of the proxy's own (`x-hopwise-*`).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of a hashed removal each.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
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
