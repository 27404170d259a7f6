//! Deadlines that travel: the time a caller has left arrives as `grpc-timeout` (gRPC) or
//! `x-hopwise-timeout-ms` (HTTP); each hop trims its own timeouts to it and sends on what is
//! left, so no hop works for a caller who has given up.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

pub const TIMEOUT_HEADER: &str = hopwise_api::names::TIMEOUT_MS;
pub const GRPC_TIMEOUT: &str = "grpc-timeout";
const TIMEOUT_NAME: HeaderName = HeaderName::from_static(TIMEOUT_HEADER);
const GRPC_TIMEOUT_NAME: HeaderName = HeaderName::from_static(GRPC_TIMEOUT);

/// The time the caller has left, if it said.
pub fn incoming(headers: &HeaderMap, grpc: bool) -> Option<Duration> {
    if grpc && let Some(v) = headers.get(GRPC_TIMEOUT_NAME) {
        return parse_grpc_timeout(v.to_str().ok()?);
    }
    let ms: u64 = headers
        .get(TIMEOUT_NAME)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// Writes the time left for the next hop (whole milliseconds, rounded down).
pub fn outgoing(headers: &mut HeaderMap, grpc: bool, left: Duration) {
    let ms = left.as_millis().min(99_999_999) as u64;
    if grpc {
        if let Ok(v) = HeaderValue::from_str(&format!("{ms}m")) {
            headers.insert(GRPC_TIMEOUT_NAME, v);
        }
    } else {
        headers.insert(TIMEOUT_NAME, HeaderValue::from(ms));
    }
}

/// gRPC's `TimeoutValue TimeoutUnit`: at most 8 digits and one of H M S m u n. Anything else
/// counts as no header (as Envoy does); `u` and `n` round up to whole milliseconds.
pub fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    let (digits, unit) = s.split_at(s.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_millis(n.div_ceil(1000)),
        "n" => Duration::from_millis(n.div_ceil(1_000_000)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_grammar() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("1500u"), Some(Duration::from_millis(2)));
        assert_eq!(parse_grpc_timeout("1n"), Some(Duration::from_millis(1)));
        for bad in ["", "m", "123456789m", "10x", "-1m", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trip_through_headers() {
        let mut h = HeaderMap::new();
        outgoing(&mut h, false, Duration::from_millis(1234));
        assert_eq!(incoming(&h, false), Some(Duration::from_millis(1234)));
        let mut h = HeaderMap::new();
        outgoing(&mut h, true, Duration::from_millis(250));
        assert_eq!(h[GRPC_TIMEOUT], "250m");
        assert_eq!(incoming(&h, true), Some(Duration::from_millis(250)));
    }
}
