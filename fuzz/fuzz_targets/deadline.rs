//! The deadline a caller sends (`hopwise_proxy::deadline`): any text as a `grpc-timeout` value
//! reads exactly as gRPC's grammar says, by an oracle written out here in nanoseconds (at most 8
//! digits, then one of `H M S m u n`; `u` and `n` rounded up to whole milliseconds) — and never
//! panics, a character of several bytes at the end included; a header set gives `grpc-timeout`
//! for gRPC (only when it is visible ASCII) and `x-hopwise-timeout-ms` otherwise; what a proxy
//! writes for the next hop reads back as the whole milliseconds it was given, capped at
//! 99,999,999 (8 digits).
#![no_main]

use std::time::Duration;

use hopwise_proxy::deadline::{
    GRPC_TIMEOUT, TIMEOUT_HEADER, incoming, outgoing, parse_grpc_timeout,
};
use http::HeaderMap;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

/// gRPC's `TimeoutValue TimeoutUnit`, not `deadline.rs`'s code: the oracle must not be the code
/// it checks.
fn grammar(text: &[u8]) -> Option<Duration> {
    if !(2..=9).contains(&text.len()) {
        return None;
    }
    let (digits, unit) = (&text[..text.len() - 1], text[text.len() - 1]);
    let value: u128 = std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.chars().all(|c| c.is_ascii_digit()))?
        .parse()
        .ok()?;
    let nanos_per = match unit {
        b'H' => 3_600_000_000_000u128,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    let millis = (value * nanos_per).div_ceil(1_000_000);
    Some(Duration::from_millis(u64::try_from(millis).ok()?))
}

/// What `HeaderValue::to_str` admits: visible ASCII and tab.
fn visible(v: &[u8]) -> Option<&str> {
    v.iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(v).ok())
        .flatten()
}

fuzz_target!(|data: &[u8]| {
    // Any text as the value.
    let text = String::from_utf8_lossy(data);
    assert_eq!(
        parse_grpc_timeout(&text),
        grammar(text.as_bytes()),
        "{text:?}"
    );

    // A header set as a proxy receives it.
    let headers = common::headers(data);
    let grpc_value = headers.get(GRPC_TIMEOUT).map(|v| v.as_bytes());
    let http_value = headers.get(TIMEOUT_HEADER).map(|v| v.as_bytes());
    let want_http = http_value
        .and_then(visible)
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_millis);
    assert_eq!(incoming(&headers, false), want_http, "{headers:?}");
    let want_grpc = match grpc_value {
        Some(v) => visible(v).and_then(|v| grammar(v.as_bytes())),
        None => want_http,
    };
    assert_eq!(incoming(&headers, true), want_grpc, "{headers:?}");

    // What is left, written for the next hop and read there.
    if let Some(bytes) = data.get(..12) {
        let secs = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
        let nanos = u32::from_le_bytes(bytes[8..].try_into().unwrap_or_default()) % 1_000_000_000;
        let left = Duration::new(secs, nanos);
        let sent = Duration::from_millis(left.as_millis().min(99_999_999) as u64);
        for grpc in [false, true] {
            let mut h = HeaderMap::new();
            outgoing(&mut h, grpc, left);
            assert_eq!(
                incoming(&h, grpc),
                Some(sent),
                "{left:?} grpc {grpc}: {h:?}"
            );
        }
    }
});
