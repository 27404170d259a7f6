//! Protocol detection on a plain connection's first bytes, both readers: the HTTP listeners'
//! `Proto::of_prefix` (over the 24 bytes `Proto::sniff` peeks) and capture's `classify` (over
//! at most the 24 bytes `detect` peeks). Neither decision depends on a byte past the limit;
//! `classify` asks for more only while under it; a decision made on a prefix stays as more
//! bytes arrive; and both agree where both decide.
#![no_main]

use hopwise_proxy::http_conn::Proto;
use hopwise_proxy::tcp::detect::{Sniff, classify};
use libfuzzer_sys::fuzz_target;

/// The peek buffer of both: the HTTP/2 preface's length.
const LIMIT: usize = 24;

fuzz_target!(|data: &[u8]| {
    let limited = &data[..data.len().min(LIMIT)];
    if !data.is_empty() {
        assert_eq!(Proto::of_prefix(data), Proto::of_prefix(limited));
    }
    assert_eq!(classify(data), classify(limited));
    let mut decided = None;
    for n in 0..=limited.len() {
        let sniff = classify(&limited[..n]);
        if sniff == Sniff::NeedMore {
            assert!(n < LIMIT, "more asked for at the limit");
            assert!(decided.is_none(), "undecided again after {decided:?}");
            continue;
        }
        assert_eq!(
            *decided.get_or_insert(sniff),
            sniff,
            "changed its mind at {n} bytes"
        );
        match sniff {
            Sniff::Http2 => assert_eq!(Proto::of_prefix(&limited[..n]), Proto::H2),
            Sniff::Http1 => assert_eq!(Proto::of_prefix(&limited[..n]), Proto::H1),
            _ => {}
        }
    }
});
