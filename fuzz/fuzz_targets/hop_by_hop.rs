//! The proxy's hop-by-hop stripping (`hopwise_proxy::headers::strip_hop_by_hop`): afterwards no
//! hop-by-hop header is left (but `te: trailers`) and no name any `Connection` value lists,
//! every `x-hopwise-*` header is as it was (a `Connection` listing it removes nothing), every
//! other header is as it was, and stripping again changes nothing.
#![no_main]

use hopwise_proxy::headers::strip_hop_by_hop;
use http::header::{self, HeaderName};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

/// Written out again, not `headers.rs`'s `is_hop_by_hop`: the oracle must not be the code it checks.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "transfer-encoding",
    "upgrade",
    "te",
];

fuzz_target!(|data: &[u8]| {
    let before = common::headers(data);
    let mut after = before.clone();
    strip_hop_by_hop(&mut after);

    let listed: Vec<HeaderName> = before
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        .collect();
    let ours = |n: &HeaderName| n.as_str().starts_with("x-hopwise-");
    for name in after.keys() {
        if name == header::TE {
            let trailers = after
                .get_all(header::TE)
                .iter()
                .all(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
            assert!(trailers, "te other than trailers left");
            assert!(!listed.contains(name), "te left though Connection lists it");
            continue;
        }
        assert!(!HOP_BY_HOP.contains(&name.as_str()), "{name} left");
        assert!(
            ours(name) || !listed.contains(name),
            "{name} left though Connection lists it"
        );
    }
    for name in before.keys() {
        let kept = ours(name) || (!HOP_BY_HOP.contains(&name.as_str()) && !listed.contains(name));
        if kept {
            assert!(
                before.get_all(name).iter().eq(after.get_all(name).iter()),
                "{name} changed"
            );
        }
    }
    let mut again = after.clone();
    strip_hop_by_hop(&mut again);
    assert_eq!(again, after, "stripping twice changed more");
});
