//! The route model's small values, each checked when it is built so that a route cannot hold
//! one a request or a response could be harmed by: header names (RFC 9110 tokens, kept in lower
//! case), header values (no CR, LF, NUL or other control character but tab), hostnames (the
//! Gateway API's: RFC 1123 names in lower case, an optional leading `*.` label, no IP address)
//! and paths (absolute and in hopwise's canonical form, `crate::path`).
//!
//! Construction only: what these values are matched against is `find.rs`'s, what they are
//! combined into is the other modules'. Errors are one-line messages; the caller adds where.

use std::fmt;

/// A header name: a non-empty RFC 9110 token, stored in lower case.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HeaderName(String);

impl HeaderName {
    pub fn new(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("a header name cannot be empty".into());
        }
        if let Some(c) = name.chars().find(|&c| !token_char(c)) {
            return Err(format!(
                "`{}` is not a header name: {c:?} is not allowed in one",
                name.escape_debug()
            ));
        }
        Ok(Self(name.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A header value hopwise may write or compare: no CR, LF or NUL (which would split or end a
/// header), nor any other control character but horizontal tab — what `http`'s `HeaderValue`
/// accepts too, so a checked value never fails later in the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderValue(String);

impl HeaderValue {
    pub fn new(value: &str) -> Result<Self, String> {
        if let Some(c) = value.chars().find(|&c| c != '\t' && c.is_ascii_control()) {
            let what = match c {
                '\r' => "a carriage return (CR)",
                '\n' => "a line feed (LF)",
                '\0' => "a NUL",
                _ => "a control character",
            };
            return Err(format!(
                "a header value cannot hold {what}: `{}`",
                value.escape_debug()
            ));
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A hostname as HTTPRoute and GRPCRoute write them: lower-case RFC 1123 labels, optionally a
/// leading wildcard label (`*.example.com`: any name with at least one more label), never an IP
/// address nor a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hostname(String);

impl Hostname {
    pub fn new(name: &str) -> Result<Self, String> {
        let bare = name.strip_prefix("*.").unwrap_or(name);
        let bad = |why: &str| {
            Err(format!(
                "`{}` is not a hostname: {why}",
                name.escape_debug()
            ))
        };
        if bare.is_empty() {
            return bad("it is empty");
        }
        if name.len() > 253 {
            return bad("it is longer than 253 characters");
        }
        if bare.parse::<std::net::Ipv4Addr>().is_ok() || bare.contains(':') {
            return bad("an IP address or a port is not a hostname");
        }
        for label in bare.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-');
            if !ok {
                return bad("each label is 1 to 63 lower-case letters, digits or `-`, \
                     not starting or ending with `-` (`*.` only in front)");
            }
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is a `*.` name.
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }

    /// Whether `host` (a request's, without its port, any case) is one this name covers.
    pub fn covers(&self, host: &str) -> bool {
        match self.0.strip_prefix('*') {
            // `.example.com`: the host must end with it and have a label before it.
            Some(suffix) => {
                host.len() > suffix.len()
                    && host.is_char_boundary(host.len() - suffix.len())
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
            None => host.eq_ignore_ascii_case(&self.0),
        }
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An absolute path in hopwise's canonical form (`crate::path`), as an `Exact` or `PathPrefix`
/// match and a redirect's or rewrite's path are written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoutePath(String);

impl RoutePath {
    pub fn new(path: &str) -> Result<Self, String> {
        if !path.starts_with('/') {
            return Err(format!("`{}` does not start with `/`", path.escape_debug()));
        }
        match crate::path::normalize(path) {
            Err(e) => Err(format!("`{}`: {e}", path.escape_debug())),
            Ok(p) if p != path => Err(format!(
                "`{}` is not in canonical form; write `{p}`",
                path.escape_debug()
            )),
            Ok(_) if path.contains(['?', '#']) || path.chars().any(|c| c.is_ascii_control()) => {
                Err(format!(
                    "`{}` holds a `?`, `#` or control character",
                    path.escape_debug()
                ))
            }
            Ok(_) => Ok(Self(path.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_refuse_what_splits_a_header() {
        for bad in ["a\r\nx-evil: 1", "a\nb", "a\rb", "a\0b", "a\x7fb"] {
            assert!(HeaderValue::new(bad).is_err(), "{bad:?}");
        }
        for good in ["", "v1", "a b\tc", "caf\u{e9}"] {
            assert!(HeaderValue::new(good).is_ok(), "{good:?}");
        }
        assert!(
            HeaderValue::new("a\r\n")
                .unwrap_err()
                .contains("carriage return")
        );
    }

    #[test]
    fn header_names_are_tokens_in_lower_case() {
        assert_eq!(HeaderName::new("X-Version").unwrap().as_str(), "x-version");
        for bad in ["", "a b", ":authority", "a\r\n", "é"] {
            assert!(HeaderName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostnames_as_the_gateway_api_writes_them() {
        for good in ["example.com", "*.example.com", "a", "a-1.b"] {
            assert!(Hostname::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "*.",
            "Example.com",
            "*.*.a",
            "a.*.b",
            "-a.b",
            "a..b",
            "10.0.0.1",
            "a:80",
            "*",
        ] {
            assert!(Hostname::new(bad).is_err(), "{bad}");
        }
        let w = Hostname::new("*.example.com").unwrap();
        assert!(w.covers("foo.example.com") && w.covers("a.b.Example.COM"));
        assert!(!w.covers("example.com") && !w.covers(".example.com") && !w.covers("xexample.com"));
        assert!(Hostname::new("example.com").unwrap().covers("EXAMPLE.com"));
    }

    #[test]
    fn paths_are_absolute_and_canonical() {
        assert!(RoutePath::new("/a/b").is_ok());
        assert!(RoutePath::new("/").is_ok());
        for bad in ["a", "", "//a", "/a/../b", "/%2F", "/a?b", "/a#b", "/%7Ea"] {
            assert!(RoutePath::new(bad).is_err(), "{bad}");
        }
    }
}
