//! The little of a request that routing looks at, borrowed from whatever holds it: the method,
//! the authority (`Host` or `:authority`), the path, the query and the headers (through
//! [`Headers`], so the proxy can lend its own header map without copying it). And the readings
//! routing makes of them: the host without its port, a query parameter's first value.
//!
//! A view and its readings only; no decision. Never allocates unless a query parameter is
//! percent-encoded.

use std::borrow::Cow;

/// A request's header values by name, as the matcher asks for them.
pub trait Headers {
    /// Whether some value of header `name` (given in lower case; compare it case-insensitively)
    /// satisfies `test`. A value that is not UTF-8 satisfies nothing.
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> bool;
}

impl Headers for &[(&str, &str)] {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> bool {
        self.iter()
            .any(|(n, v)| n.eq_ignore_ascii_case(name) && test(v))
    }
}

/// What routing sees of one request.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// `Host` or `:authority`, with or without a port; `None` when the request had none.
    pub authority: Option<&'a str>,
    /// The path as it arrived (without the query); [`super::find`] matches its canonical form.
    pub path: &'a str,
    /// What follows `?`, without it.
    pub query: Option<&'a str>,
    pub headers: &'a dyn Headers,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("authority", &self.authority)
            .field("path", &self.path)
            .field("query", &self.query)
            .finish_non_exhaustive()
    }
}

impl<'a> Request<'a> {
    /// The host the authority names, without its port or a final `.` (`Example.com.:80` →
    /// `Example.com`; case is left to the comparison).
    pub fn host(&self) -> Option<&'a str> {
        let a = self.authority?;
        let a = a.rsplit_once('@').map_or(a, |(_, h)| h);
        let host = if a.starts_with('[') {
            // An IPv6 literal: never a route's hostname, kept whole.
            &a[..a.find(']').map_or(a.len(), |i| i + 1)]
        } else {
            match a.rsplit_once(':') {
                Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
                _ => a,
            }
        };
        Some(host.strip_suffix('.').unwrap_or(host))
    }

    /// The first value of query parameter `name` (names compared exactly after decoding), with
    /// `%xx` decoded; `""` for `?name` and `?name=`. `None` if the query has no such parameter,
    /// or its value does not decode to UTF-8.
    pub fn query_param(&self, name: &str) -> Option<Cow<'a, str>> {
        let query = self.query?;
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if decode(k).as_deref() == Some(name) {
                return decode(v);
            }
        }
        None
    }
}

/// `%xx` decoded (a `%` not followed by two hex digits kept as it is); `None` if the result is
/// not UTF-8. `+` stays `+`: it is a space only in HTML forms, not in URIs.
fn decode(s: &str) -> Option<Cow<'_, str>> {
    if !s.contains('%') {
        return Some(Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(authority: Option<&'a str>, query: Option<&'a str>) -> Request<'a> {
        const NONE: &[(&str, &str)] = &[];
        Request {
            method: "GET",
            authority,
            path: "/",
            query,
            headers: &NONE,
        }
    }

    #[test]
    fn host_drops_the_port_and_a_final_dot() {
        let host = |a| req(Some(a), None).host().unwrap();
        assert_eq!(host("example.com:8080"), "example.com");
        assert_eq!(host("Example.com."), "Example.com");
        assert_eq!(host("example.com"), "example.com");
        assert_eq!(host("[::1]:80"), "[::1]");
        assert_eq!(host("user@a.b:1"), "a.b");
        assert_eq!(req(None, None).host(), None);
    }

    #[test]
    fn query_params_first_value_decoded_names_exact() {
        let r = req(
            None,
            Some("animal=whale&animal=dolphin&ANIMAL=Whale&e&c%6Flor=bl%75e&x=%zz"),
        );
        assert_eq!(r.query_param("animal").as_deref(), Some("whale"));
        assert_eq!(r.query_param("ANIMAL").as_deref(), Some("Whale"));
        assert_eq!(r.query_param("color").as_deref(), Some("blue"));
        assert_eq!(r.query_param("e").as_deref(), Some(""));
        assert_eq!(r.query_param("x").as_deref(), Some("%zz"));
        assert_eq!(r.query_param("dog"), None);
        assert_eq!(req(None, Some("a=%FF")).query_param("a"), None);
        assert_eq!(req(None, None).query_param("a"), None);
    }
}
