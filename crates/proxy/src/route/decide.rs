//! The routing decision as a value, from plain data only (like ztunnel's `build_request`): the
//! request's view, the callee's routes and a random draw in; what to do out — forward to a
//! backend with these edits, answer a redirect, answer 500 (no backend has weight) or 404 (no
//! rule takes the request). The rule is `model`'s `Table::find` (`find`'s answer, the Gateway
//! API's precedence, without trying the rules a request's missing headers rule out), the
//! backend `model`'s `pick_backend`; this adds what the rule's filters make of the request: the
//! `Location` of a redirect and the path of a rewrite.
//!
//! Pure: no I/O, no clock, no randomness of its own, no `http` types; table-tested in
//! `route/tests.rs` without a socket. Applying the decision is `apply.rs`'s.

use std::borrow::Cow;
use std::fmt::Write;

use hopwise_model::route::{
    self, Filter, GrpcMatch, HeaderModifier, Match, Matcher, PathMatch, PathModifier, Pick,
    Redirect, Request, Rewrite, RulePolicy, Table, Target,
};

use super::{RouteTable, Routes};

/// What the proxy does with a request to a service that has routes.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<'r> {
    /// Send it to `backend`, changed as the rule says.
    Forward(Forward<'r>),
    /// Answer it here: `status` (301, 302, 303, 307, 308) with `location`.
    Redirect { status: u16, location: String },
    /// The rule it took has no backend with weight: the Gateway API's 500 (gRPC: UNAVAILABLE).
    NoBackend {
        route: &'r str,
        rule: Option<&'r str>,
        /// The rule's place among every rule of the table ([`RouteTable::rules`]).
        index: usize,
    },
    /// No rule takes it: the Gateway API's 404 (gRPC: UNIMPLEMENTED).
    NoMatch,
}

/// A request on its way to a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward<'r> {
    /// The route and rule that took it, and the rule's place among every rule of the table
    /// ([`RouteTable::rules`]: its metrics' handle).
    pub route: &'r str,
    pub rule: Option<&'r str>,
    pub index: usize,
    /// The service (and label subset) it goes to.
    pub backend: &'r Target,
    /// `RequestHeaderModifier`, applied before it is sent.
    pub request_headers: Option<&'r HeaderModifier>,
    /// `ResponseHeaderModifier`, applied to the answer.
    pub response_headers: Option<&'r HeaderModifier>,
    /// `URLRewrite`, if the rule has one.
    pub rewrite: Option<UrlRewrite<'r>>,
    /// Where a copy of it goes too (`RequestMirror`, taken by its percentage).
    pub mirrors: Vec<&'r Target>,
    /// The rule's `timeouts` and `retry`, laid over the call's policy for this request
    /// (`RulePolicy::over`); none: the call's policy alone.
    pub policy: Option<&'r RulePolicy>,
}

/// A rewrite worked out for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlRewrite<'r> {
    /// The `Host` the backend is sent.
    pub hostname: Option<&'r str>,
    /// The new path (the query is kept).
    pub path: Option<String>,
}

/// The decision for `request` among `table`'s routes. `request.path` is canonical (the proxy
/// made it so when the request arrived); `draw` is a uniform random number, which picks the
/// backend by weight.
pub fn decide<'r>(table: &'r RouteTable, request: &Request<'_>, draw: u32) -> Decision<'r> {
    match &table.routes {
        Routes::Http(routes) => decide_in(table, routes, request, draw),
        Routes::Grpc(routes) => decide_in(table, routes, request, draw),
    }
}

fn decide_in<'r, M: Matcher + Prefix>(
    table: &'r RouteTable,
    routes: &'r Table<M>,
    request: &Request<'_>,
    draw: u32,
) -> Decision<'r> {
    let Some((found, rule, m)) = routes.find(request) else {
        return Decision::NoMatch;
    };
    let at = (routes.routes().iter()).position(|r| std::ptr::eq(r, found));
    let name = at
        .and_then(|i| table.names.get(i))
        .map_or("", String::as_str);
    let index = at.and_then(|i| table.offsets.get(i)).copied().unwrap_or(0)
        + (found.rules.iter())
            .position(|r| std::ptr::eq(r, rule))
            .unwrap_or(0);
    let rule_name = rule.name.as_deref();
    let prefix = m.prefix();
    let (mut request_headers, mut response_headers, mut rewrite) = (None, None, None);
    let mut mirrors = Vec::new();
    // The mirror's own draw from the same number, its bits turned so it does not follow the
    // backend's pick (which reads the draw modulo the weights).
    let mirror_draw = draw.rotate_left(16);
    for filter in &rule.filters {
        match filter {
            Filter::RequestRedirect(r) => {
                return Decision::Redirect {
                    status: r.status.code(),
                    location: location(r, request, prefix),
                };
            }
            Filter::RequestHeaderModifier(h) => request_headers = Some(h),
            Filter::ResponseHeaderModifier(h) => response_headers = Some(h),
            Filter::UrlRewrite(r) => rewrite = Some(url_rewrite(r, request.path, prefix)),
            Filter::RequestMirror(m) if m.takes(mirror_draw) => mirrors.push(&m.target),
            Filter::RequestMirror(_) => {}
        }
    }
    match route::pick_backend(rule, draw) {
        Pick::NoBackend => Decision::NoBackend {
            route: name,
            rule: rule_name,
            index,
        },
        Pick::Backend(b) => Decision::Forward(Forward {
            route: name,
            rule: rule_name,
            index,
            backend: &b.target,
            request_headers,
            response_headers,
            rewrite,
            mirrors,
            policy: rule.policy.as_ref(),
        }),
    }
}

/// The part of the path a match took, for `ReplacePrefixMatch`: a `PathPrefix`'s value (a
/// rule without matches holds the default `/`); nothing for other matches, which `check` keeps
/// from standing beside `ReplacePrefixMatch`.
pub trait Prefix {
    fn prefix(&self) -> Option<&str>;
}

impl Prefix for Match {
    fn prefix(&self) -> Option<&str> {
        match &self.path {
            PathMatch::PathPrefix(p) => Some(p.as_str()),
            PathMatch::Exact(_) | PathMatch::RegularExpression(_) => None,
        }
    }
}

impl Prefix for GrpcMatch {
    fn prefix(&self) -> Option<&str> {
        None
    }
}

fn url_rewrite<'r>(r: &'r Rewrite, path: &str, prefix: Option<&str>) -> UrlRewrite<'r> {
    UrlRewrite {
        hostname: r.hostname.as_ref().map(|h| h.as_str()),
        path: r
            .path
            .as_ref()
            .map(|m| modified_path(Some(m), path, prefix).into_owned()),
    }
}

/// `path` as a path modifier changes it (HTTPPathModifier): the whole path replaced, or the
/// part `prefix` took (a `PathPrefix` without its trailing `/`, or `/`) replaced and the rest
/// kept, `/` if nothing is left — the spec's table (`/foo` → `/xyz/`: `/foo/bar` → `/xyz/bar`,
/// `/foo/` → `/xyz/`; → `/`: `/foo` → `/`).
pub fn modified_path<'p>(
    modifier: Option<&'p PathModifier>,
    path: &'p str,
    prefix: Option<&str>,
) -> Cow<'p, str> {
    match modifier {
        None => Cow::Borrowed(path),
        Some(PathModifier::ReplaceFullPath(p)) => Cow::Borrowed(p.as_str()),
        Some(PathModifier::ReplacePrefixMatch(p)) => {
            let rest = match prefix {
                Some("/") => Some(path),
                Some(prefix) => path
                    .strip_prefix(prefix)
                    .filter(|rest| rest.is_empty() || rest.starts_with('/')),
                None => None,
            };
            let Some(rest) = rest else {
                // Not a prefix match (`check` refuses such a rule): the path as it came.
                return Cow::Borrowed(path);
            };
            let out = format!("{}{rest}", p.as_str().trim_end_matches('/'));
            Cow::Owned(if out.is_empty() { "/".to_owned() } else { out })
        }
    }
}

/// A redirect's `Location` (HTTPRequestRedirectFilter): each part the filter leaves out is the
/// request's — the scheme `http` (what an app speaks to its proxy), the host of its authority,
/// its path and query. The port: the filter's; else the well-known port of a scheme it names;
/// else the request's own. It is left out when it is its scheme's well-known one (80, 443), as
/// the spec asks. Without a host to name, the `Location` is the path alone (a relative
/// reference, RFC 9110 §10.2.2).
pub fn location(r: &Redirect, request: &Request<'_>, prefix: Option<&str>) -> String {
    let scheme = r.scheme.map_or("http", |s| s.as_str());
    let host = match &r.hostname {
        Some(h) => Some(h.as_str()),
        None => request.host(),
    };
    let port = r.port.or_else(|| match r.scheme {
        Some(_) => None,
        None => request_port(request),
    });
    let path = modified_path(r.path.as_ref(), request.path, prefix);
    let mut out = String::new();
    if let Some(host) = host.filter(|h| !h.is_empty()) {
        let _ = write!(out, "{scheme}://{host}");
        let well_known = if scheme == "https" { 443 } else { 80 };
        if let Some(p) = port.filter(|p| *p != well_known) {
            let _ = write!(out, ":{p}");
        }
    }
    out.push_str(&path);
    if let Some(q) = request.query {
        out.push('?');
        out.push_str(q);
    }
    escape(out)
}

/// The port of the request's authority, if it names one.
fn request_port(request: &Request<'_>) -> Option<u16> {
    let authority = request.authority?;
    let (_, port) = authority.rsplit_once(':')?;
    // `[::1]` has colons but no port after its `]`.
    port.parse().ok()
}

/// A `Location` that is always a valid header value: a byte outside visible ASCII written as
/// `%XX` (none can reach here from a checked route, but a request's own parts are its own).
fn escape(s: String) -> String {
    if s.bytes().all(|b| b.is_ascii_graphic()) {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
