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
/// counts as no header (as Envoy does); `u` and `n` round up to whole milliseconds. Read as
/// bytes: the unit is the last byte, so text ending in a character of several bytes is refused,
/// never cut inside it.
pub fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    let (&unit, digits) = s.as_bytes().split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 8 digits: no overflow.
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_millis(n.div_ceil(1000)),
        b'n' => Duration::from_millis(n.div_ceil(1_000_000)),
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
    fn a_unit_of_several_bytes_is_refused_not_cut() {
        // Found by fuzzing (issue 34): the last character was taken as one byte, so `é` (two
        // bytes) was split in half and `split_at` panicked.
        for bad in ["1é", "é", "100µ", "5\u{1F600}", "m\u{301}"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
        // A digit string of other scripts is no number either.
        assert_eq!(parse_grpc_timeout("١٢m"), None);
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
