//! What a rule does to a request it takes, as HTTPRouteFilter writes it: change request or
//! response headers (set, add, remove), answer with a redirect (scheme, hostname, port, path,
//! status), rewrite the URL (hostname, whole path or the matched prefix), or mirror the request
//! to another backend for a percentage of requests.
//!
//! Data only, every value checked when built (`values.rs`): no CR, LF or NUL can reach a header
//! or a `Location`. Which filters may stand together, and the one that needs a `PathPrefix`
//! match, is `check.rs`'s; applying them is the proxy's.

use super::backend::Target;
use super::values::{HeaderName, HeaderValue, Hostname, RoutePath};

/// One filter of a rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    RequestHeaderModifier(HeaderModifier),
    ResponseHeaderModifier(HeaderModifier),
    /// Answer with a redirect instead of forwarding (HTTPRoute only).
    RequestRedirect(Redirect),
    /// `URLRewrite` (HTTPRoute only).
    UrlRewrite(Rewrite),
    /// Send a copy too, its answer ignored.
    RequestMirror(Mirror),
}

impl Filter {
    /// The name the Gateway API gives the filter's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RequestHeaderModifier(_) => "RequestHeaderModifier",
            Self::ResponseHeaderModifier(_) => "ResponseHeaderModifier",
            Self::RequestRedirect(_) => "RequestRedirect",
            Self::UrlRewrite(_) => "URLRewrite",
            Self::RequestMirror(_) => "RequestMirror",
        }
    }

    /// The field that holds the filter's settings (the spec's, in the mesh file's snake case).
    pub fn field(&self) -> &'static str {
        match self {
            Self::RequestHeaderModifier(_) => "request_header_modifier",
            Self::ResponseHeaderModifier(_) => "response_header_modifier",
            Self::RequestRedirect(_) => "request_redirect",
            Self::UrlRewrite(_) => "url_rewrite",
            Self::RequestMirror(_) => "request_mirror",
        }
    }
}

/// HTTPHeaderFilter: `set` replaces (or adds) a header, `add` appends a value, `remove` drops
/// every value. Names are unique within each list (`check`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeaderModifier {
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub add: Vec<(HeaderName, HeaderValue)>,
    pub remove: Vec<HeaderName>,
}

/// HTTPRequestRedirectFilter: each field left out keeps the request's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Redirect {
    pub scheme: Option<Scheme>,
    /// A precise name (no `*.`, `check`).
    pub hostname: Option<Hostname>,
    pub port: Option<u16>,
    pub path: Option<PathModifier>,
    pub status: RedirectStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// A redirect's status: 302 unless given (301 and 302 are the spec's core; 303, 307 and 308
/// its extended support).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedirectStatus {
    MovedPermanently,
    #[default]
    Found,
    SeeOther,
    TemporaryRedirect,
    PermanentRedirect,
}

impl RedirectStatus {
    pub fn code(self) -> u16 {
        match self {
            Self::MovedPermanently => 301,
            Self::Found => 302,
            Self::SeeOther => 303,
            Self::TemporaryRedirect => 307,
            Self::PermanentRedirect => 308,
        }
    }

    pub fn from_code(code: u16) -> Result<Self, String> {
        [
            Self::MovedPermanently,
            Self::Found,
            Self::SeeOther,
            Self::TemporaryRedirect,
            Self::PermanentRedirect,
        ]
        .into_iter()
        .find(|s| s.code() == code)
        .ok_or_else(|| format!("a redirect's status is 301, 302, 303, 307 or 308, not {code}"))
    }
}

/// HTTPPathModifier: the new path for a redirect or rewrite.
#[derive(Debug, Clone, PartialEq)]
pub enum PathModifier {
    /// The whole path replaced.
    ReplaceFullPath(RoutePath),
    /// The part the rule's `PathPrefix` matched replaced, the rest kept (`/foo` → `/bar`:
    /// `/foo/x` → `/bar/x`). Only in a rule with exactly one match, a `PathPrefix` (`check`).
    ReplacePrefixMatch(RoutePath),
}

/// HTTPURLRewriteFilter: each field left out keeps the request's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rewrite {
    /// A precise name (no `*.`, `check`).
    pub hostname: Option<Hostname>,
    pub path: Option<PathModifier>,
}

/// HTTPRequestMirrorFilter: a copy of `percent` % of the requests sent to `target` too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub target: Target,
    /// 0 to 100 (`check`); the spec's default is 100.
    pub percent: u8,
}

impl Mirror {
    /// Whether the request with this `draw` (the caller's random number) is mirrored: the draw
    /// taken modulo 100, so of draws `0..100` exactly `percent` are. Pure, like the backend pick.
    pub fn takes(&self, draw: u32) -> bool {
        draw % 100 < u32::from(self.percent)
    }
}
