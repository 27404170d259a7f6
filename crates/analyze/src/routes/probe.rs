//! The request `hopwise check --request` asks about, written on one line as a user would type
//! it to curl: `GET pricing/quote?id=7 -H version:two -H 'x-user: a b'`. The method; the target
//! (`/path`, `host/path`, `host:port/path` or `http://host/path`, a query after `?`); then any
//! number of `-H name:value` (a `Host` header names the host when the target does not).
//! Words may be quoted with `'` or `"`.
//!
//! Parsing only, into a [`Probe`] that lends itself to `model`'s route [`Request`] view; which
//! rule it takes is `routes.rs`'s.

use hopwise_model::route::{Headers, Request};

/// One request, as `--request` wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub method: String,
    /// The target's host (and port), else the `Host` header's; `None` if neither gave one.
    pub authority: Option<String>,
    pub path: String,
    pub query: Option<String>,
    pub headers: ProbeHeaders,
}

/// The `-H` headers, in order, names as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProbeHeaders(pub Vec<(String, String)>);

impl Headers for ProbeHeaders {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> bool {
        self.0
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case(name) && test(v))
    }
}

/// Why a `--request` line is not a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "a request is `METHOD TARGET [-H name:value]...`, e.g. `GET pricing/quote -H version:two`"
    )]
    Incomplete,
    #[error("a quote (`{0}`) is not closed")]
    UnclosedQuote(char),
    #[error("`{0}` is not a method (upper-case letters, as on the wire: GET, POST)")]
    BadMethod(String),
    #[error("`{0}` is not a target: write `/path`, `host/path` or `http://host/path`")]
    BadTarget(String),
    #[error("`-H {0}` is not a header: write `-H name:value`")]
    BadHeader(String),
    #[error("`{0}`: only `-H name:value` may follow the target")]
    Unexpected(String),
}

impl Probe {
    pub fn parse(line: &str) -> Result<Self, ProbeError> {
        let words = split(line)?;
        let mut words = words.into_iter();
        let (Some(method), Some(target)) = (words.next(), words.next()) else {
            return Err(ProbeError::Incomplete);
        };
        if !method.bytes().all(|b| b.is_ascii_uppercase()) || method.is_empty() {
            return Err(ProbeError::BadMethod(method));
        }
        let (authority, rest) = split_target(&target)?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (rest, None),
        };
        // `host` and `host?q` ask for `/`.
        let path = if path.is_empty() { "/" } else { path }.to_owned();
        let mut headers = Vec::new();
        while let Some(word) = words.next() {
            if word != "-H" {
                return Err(ProbeError::Unexpected(word));
            }
            let header = words.next().ok_or(ProbeError::Incomplete)?;
            let Some((name, value)) = header.split_once(':') else {
                return Err(ProbeError::BadHeader(header));
            };
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(ProbeError::BadHeader(header));
            }
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        let authority = authority.map(str::to_owned).or_else(|| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                .map(|(_, v)| v.clone())
        });
        Ok(Self {
            method,
            authority,
            path,
            query,
            headers: ProbeHeaders(headers),
        })
    }

    /// What routing sees of it.
    pub fn view(&self) -> Request<'_> {
        Request {
            method: &self.method,
            authority: self.authority.as_deref(),
            path: &self.path,
            query: self.query.as_deref(),
            headers: &self.headers,
        }
    }
}

/// The target's authority, if it names one, and the rest (path and query, maybe empty).
fn split_target(target: &str) -> Result<(Option<&str>, &str), ProbeError> {
    if target.starts_with('/') {
        return Ok((None, target));
    }
    let bare = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
        .unwrap_or(target);
    let (authority, rest) = match bare.find(['/', '?']) {
        Some(i) => (&bare[..i], &bare[i..]),
        None => (bare, ""),
    };
    let other_scheme = target
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme != "http" && scheme != "https");
    if authority.is_empty() || other_scheme {
        return Err(ProbeError::BadTarget(target.to_owned()));
    }
    Ok((Some(authority), rest))
}

/// Words split on whitespace, `'…'` and `"…"` kept whole (quotes removed).
fn split(line: &str) -> Result<Vec<String>, ProbeError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(q) = quote {
        return Err(ProbeError::UnclosedQuote(q));
    }
    words.extend(word);
    Ok(words)
}
