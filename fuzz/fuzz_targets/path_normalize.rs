//! `hopwise_model::path`: a canonical path is its own canonical form, and a refused path stays
//! refused (with the same reason) however it is respelled: unreserved characters
//! percent-encoded, slashes doubled, a `/x/..` detour in front.
#![no_main]

use hopwise_model::path::{is_normal, normalize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = String::from_utf8_lossy(data);
    let got = normalize(&path);
    if let Ok(canonical) = &got {
        assert!(
            is_normal(canonical),
            "{path:?} → {canonical:?} is not canonical"
        );
        assert!(canonical.is_empty() || *canonical == "*" || canonical.starts_with('/'));
        assert!(!canonical.contains("//"), "{canonical:?}");
        for segment in canonical.split('/') {
            assert!(segment != "." && segment != "..", "{canonical:?}");
        }
    }
    if path.is_empty() || path == "*" || !path.starts_with('/') {
        return;
    }
    let want = got.as_deref().map_err(|e| *e);
    for respelled in [encoded(&path), doubled(&path), format!("/x/..{path}")] {
        let again = normalize(&respelled);
        assert_eq!(
            again.as_deref().map_err(|e| *e),
            want,
            "{path:?} respelled {respelled:?}"
        );
    }
});

/// Every unreserved character as `%xx` (lower-case hex), but those a `%` escape reads.
fn encoded(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len() * 3);
    for (i, c) in path.char_indices() {
        let escaped = (i >= 1 && b[i - 1] == b'%') || (i >= 2 && b[i - 2] == b'%');
        if !escaped && (c.is_ascii_alphanumeric() || "-._~".contains(c)) {
            out.push_str(&format!("%{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Every `/` written twice.
fn doubled(path: &str) -> String {
    path.replace('/', "//")
}
