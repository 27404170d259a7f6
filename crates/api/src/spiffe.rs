//! SPIFFE IDs as the SPIFFE ID specification defines them, checked strictly: a proxy decides
//! who a caller is from this string, so anything the spec does not allow is no identity at all.
//!
//! `spiffe://<trust-domain>[/<segment>…]`: the scheme in lower case; the trust domain made of
//! lower-case letters, digits, `.`, `-` and `_` (no port, no userinfo); each path segment
//! non-empty, neither `.` nor `..`, made of letters, digits, `.`, `-` and `_` (no
//! percent-encoding); no trailing `/`, no query, no fragment; at most 2048 bytes, the trust
//! domain at most 255. Pure.

/// Why a string is not a SPIFFE ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpiffeIdError {
    #[error("the scheme is not `spiffe://` (in lower case)")]
    Scheme,
    #[error(
        "the trust domain is empty, too long, or not lower-case letters, digits, `.`, `-`, `_`"
    )]
    TrustDomain,
    #[error("a path segment is empty, `.`, `..`, or not letters, digits, `.`, `-`, `_`")]
    Path,
    #[error("the ID is longer than 2048 bytes")]
    TooLong,
}

const MAX_ID: usize = 2048;
const MAX_TRUST_DOMAIN: usize = 255;

/// Checks `id`; returns its trust domain.
pub fn parse_id(id: &str) -> Result<&str, SpiffeIdError> {
    if id.len() > MAX_ID {
        return Err(SpiffeIdError::TooLong);
    }
    let rest = id.strip_prefix("spiffe://").ok_or(SpiffeIdError::Scheme)?;
    let (domain, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let domain_char = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b".-_".contains(&c);
    if domain.is_empty() || domain.len() > MAX_TRUST_DOMAIN || !domain.bytes().all(domain_char) {
        return Err(SpiffeIdError::TrustDomain);
    }
    if !path.is_empty() {
        let segment_char = |c: u8| c.is_ascii_alphanumeric() || b".-_".contains(&c);
        for segment in path[1..].split('/') {
            if segment.is_empty()
                || segment == "."
                || segment == ".."
                || !segment.bytes().all(segment_char)
            {
                return Err(SpiffeIdError::Path);
            }
        }
    }
    Ok(domain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_by_the_spec() {
        for ok in [
            "spiffe://shop.local/service/loan",
            "spiffe://shop.local",
            "spiffe://a_b-c.9/x.y/Z-1_",
        ] {
            assert!(parse_id(ok).is_ok(), "{ok}");
        }
        assert_eq!(parse_id("spiffe://shop.local/control"), Ok("shop.local"));
        for (bad, e) in [
            ("SPIFFE://shop.local/service/loan", SpiffeIdError::Scheme),
            ("Spiffe://shop.local/service/loan", SpiffeIdError::Scheme),
            ("https://shop.local/service/loan", SpiffeIdError::Scheme),
            ("spiffe:/shop.local/service/loan", SpiffeIdError::Scheme),
            ("spiffe:///service/loan", SpiffeIdError::TrustDomain),
            (
                "spiffe://Shop.local/service/loan",
                SpiffeIdError::TrustDomain,
            ),
            (
                "spiffe://shop.local:443/service/loan",
                SpiffeIdError::TrustDomain,
            ),
            (
                "spiffe://u@shop.local/service/loan",
                SpiffeIdError::TrustDomain,
            ),
            ("spiffe://shop.local?x/service", SpiffeIdError::TrustDomain),
            ("spiffe://shop.local/service/loan/", SpiffeIdError::Path),
            ("spiffe://shop.local//loan", SpiffeIdError::Path),
            ("spiffe://shop.local/service/../loan", SpiffeIdError::Path),
            ("spiffe://shop.local/service/./loan", SpiffeIdError::Path),
            ("spiffe://shop.local/service/lo%61n", SpiffeIdError::Path),
            ("spiffe://shop.local/service/loan?x=1", SpiffeIdError::Path),
            ("spiffe://shop.local/service/loan#f", SpiffeIdError::Path),
            ("spiffe://shop.local/service/lo an", SpiffeIdError::Path),
        ] {
            assert_eq!(parse_id(bad), Err(e), "{bad}");
        }
        let long = format!("spiffe://shop.local/{}", "a".repeat(2048));
        assert_eq!(parse_id(&long), Err(SpiffeIdError::TooLong));
        let domain = format!("spiffe://{}/a", "a".repeat(256));
        assert_eq!(parse_id(&domain), Err(SpiffeIdError::TrustDomain));
    }

    proptest! {
        /// What passes is a valid header value and has none of the characters a URI would
        /// read as structure beyond its path.
        #[test]
        fn accepted_ids_are_plain(s in "\\PC{0,60}|spiffe://[a-z.]{0,8}(/[a-zA-Z.%?#:@]{0,5}){0,3}") {
            if parse_id(&s).is_ok() {
                prop_assert!(s.bytes().all(|c| c.is_ascii_graphic()));
                prop_assert!(!s[9..].contains(['?', '#', ':', '@', '%']));
            }
        }
    }
}
