//! What a rule matches, as HTTPRouteMatch and GRPCRouteMatch write it: a path (`Exact`,
//! `PathPrefix`, `RegularExpression`), headers, query parameters and a method for HTTP; a
//! service and method (`Exact`, `RegularExpression`) and headers for gRPC. Every condition of
//! one match must hold (AND); a rule takes a request if any of its matches does (OR).
//!
//! Data only, built from checked values; asking a match about a request, and ranking matches,
//! is `find.rs`'s.

use super::pattern::Pattern;
use super::values::{HeaderName, HeaderValue, RoutePath};

/// One HTTPRouteMatch. The default is the spec's: a `PathPrefix` of `/`, nothing else.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Match {
    pub path: PathMatch,
    /// Each must hold; names unique within the match (`check`).
    pub headers: Vec<HeaderMatch>,
    /// Each must hold; names unique within the match (`check`).
    pub query_params: Vec<QueryMatch>,
    pub method: Option<Method>,
}

/// How the request's canonical path is compared.
#[derive(Debug, Clone, PartialEq)]
pub enum PathMatch {
    /// The whole path, case-sensitive.
    Exact(RoutePath),
    /// Whole segments: `/foo` takes `/foo`, `/foo/` and `/foo/bar`, never `/foobar`. A trailing
    /// `/` in the prefix is ignored (`/foo/` is `/foo`).
    PathPrefix(RoutePath),
    /// The whole path matches the pattern.
    RegularExpression(Pattern),
}

impl PathMatch {
    /// `PathPrefix` of `path`, its trailing `/` dropped as the spec says (`/` stays `/`).
    pub fn prefix(path: &str) -> Result<Self, String> {
        let checked = RoutePath::new(path)?;
        Ok(Self::PathPrefix(match path.strip_suffix('/') {
            Some(t) if !t.is_empty() => RoutePath::new(t)?,
            _ => checked,
        }))
    }

    pub fn exact(path: &str) -> Result<Self, String> {
        Ok(Self::Exact(RoutePath::new(path)?))
    }
}

impl Default for PathMatch {
    fn default() -> Self {
        Self::PathPrefix(RoutePath::new("/").expect("`/` is canonical"))
    }
}

/// A header compared: its name case-insensitively, and any of its values (a header sent twice
/// matches if either value does).
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderMatch {
    pub name: HeaderName,
    pub value: StringMatch,
}

/// A query parameter's value compared; its name is compared exactly (case-sensitive), and the
/// first parameter of that name in the request is the one compared.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryMatch {
    pub name: String,
    pub value: StringMatch,
}

/// An `Exact` or `RegularExpression` comparison of a whole value.
#[derive(Debug, Clone, PartialEq)]
pub enum StringMatch {
    Exact(HeaderValue),
    RegularExpression(Pattern),
}

impl StringMatch {
    pub fn is_match(&self, value: &str) -> bool {
        match self {
            Self::Exact(v) => v.as_str() == value,
            Self::RegularExpression(p) => p.matches(value),
        }
    }
}

/// The methods HTTPRouteMatch names (upper case, as on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
}

impl Method {
    pub const ALL: [Method; 9] = [
        Self::Get,
        Self::Head,
        Self::Post,
        Self::Put,
        Self::Delete,
        Self::Connect,
        Self::Options,
        Self::Trace,
        Self::Patch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Options => "OPTIONS",
            Self::Trace => "TRACE",
            Self::Patch => "PATCH",
        }
    }

    /// The method spelt `word` (exactly: methods are case-sensitive).
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == word)
    }
}

/// One GRPCRouteMatch: the method, if given, and every header.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GrpcMatch {
    pub method: Option<GrpcMethodMatch>,
    pub headers: Vec<HeaderMatch>,
}

/// GRPCMethodMatch: the service (`pkg.Service`) and the method (`Method`) of the request's
/// path `/pkg.Service/Method`, either left out meaning any (but not both).
#[derive(Debug, Clone, PartialEq)]
pub enum GrpcMethodMatch {
    /// Case-sensitive equality.
    Exact {
        service: Option<String>,
        method: Option<String>,
    },
    RegularExpression {
        service: Option<Pattern>,
        method: Option<Pattern>,
    },
}

impl GrpcMethodMatch {
    /// An `Exact` match, checked as the spec's validation does: a service is dotted
    /// identifiers (`pkg.v1.Service`), a method an identifier, at least one given.
    pub fn exact(service: Option<&str>, method: Option<&str>) -> Result<Self, String> {
        if service.is_none() && method.is_none() {
            return Err("a gRPC method match names a service, a method or both".into());
        }
        if let Some(s) = service
            && !s.trim_start_matches('.').split('.').all(identifier)
        {
            return Err(format!("`{s}` is not a gRPC service name (`pkg.Service`)"));
        }
        if let Some(m) = method
            && !identifier(m)
        {
            return Err(format!("`{m}` is not a gRPC method name"));
        }
        Ok(Self::Exact {
            // The spec allows a leading `.` (a fully qualified name); paths never carry it.
            service: service.map(|s| s.trim_start_matches('.').to_owned()),
            method: method.map(str::to_owned),
        })
    }

    /// A `RegularExpression` match (each side a whole-value pattern), at least one given.
    pub fn regex(service: Option<&str>, method: Option<&str>) -> Result<Self, String> {
        if service.is_none() && method.is_none() {
            return Err("a gRPC method match names a service, a method or both".into());
        }
        Ok(Self::RegularExpression {
            service: service.map(Pattern::new).transpose()?,
            method: method.map(Pattern::new).transpose()?,
        })
    }
}

fn identifier(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}
