//! A match as written made into the route model, by the kind of route: an HTTPRoute's (path,
//! headers, query parameters, an HTTP method) or a GRPCRoute's (a service and method, headers).
//! A field of the other kind is a problem, at its path and line. Also the little state the
//! conversion carries (`Out`: the file's services, where things stand, the problems).
//!
//! Only the conversion of one match; the rest of a route is `resolve.rs`'s.

use indexmap::IndexMap;

use super::matches::{
    GrpcMatch, GrpcMethodMatch, HeaderMatch, Match, Method, PathMatch, QueryMatch, StringMatch,
};
use super::pattern::Pattern;
use super::values::{HeaderName, HeaderValue};
use crate::diag::Diagnostic;
use crate::raw::{
    PathMatchType, RawMethodMatch, RawRouteMatch, RawService, RawValueMatch, ValueMatchType,
};
use crate::read::Locations;

/// What the conversion carries: the file's services, positions, and the problems found.
pub(super) struct Out<'a> {
    pub services: &'a IndexMap<String, RawService>,
    pub locations: &'a Locations,
    pub diags: &'a mut Vec<Diagnostic>,
}

impl Out<'_> {
    pub fn error(&mut self, at: &str, message: String) {
        self.diags
            .push(Diagnostic::new(at, self.locations.of(at), message));
    }

    /// The value, or `None` with its problem reported at `at`.
    pub fn value<T>(&mut self, at: &str, v: Result<T, String>) -> Option<T> {
        v.map_err(|e| self.error(at, e)).ok()
    }

    /// A field that must be written (`{at}.{field}`), or `None` with a problem at `at`.
    pub fn required<'v>(&mut self, v: Option<&'v str>, at: &str, field: &str) -> Option<&'v str> {
        if v.is_none() {
            self.error(at, format!("`{field}` is required here"));
        }
        v
    }
}

/// A kind of match the mesh file can write.
pub(super) trait MatchKind: Sized {
    /// The route's kind as the Gateway API names it (`HTTPRoute`, `GRPCRoute`).
    const KIND: &'static str;
    /// Whether its rules take `timeouts` and `retry` (HTTPRoute's; GRPCRoute has neither).
    const TAKES_POLICY: bool;
    fn resolve(raw: &RawRouteMatch, at: &str, out: &mut Out<'_>) -> Option<Self>;
}

impl MatchKind for Match {
    const KIND: &'static str = "HTTPRoute";
    const TAKES_POLICY: bool = true;
    fn resolve(raw: &RawRouteMatch, at: &str, out: &mut Out<'_>) -> Option<Self> {
        let path = match &raw.path {
            None => Some(PathMatch::default()),
            Some(p) => {
                let value = p.value.as_deref().unwrap_or("/");
                let path = match p.kind.unwrap_or(PathMatchType::PathPrefix) {
                    PathMatchType::Exact => PathMatch::exact(value),
                    PathMatchType::PathPrefix => PathMatch::prefix(value),
                    PathMatchType::RegularExpression => {
                        Pattern::new(value).map(PathMatch::RegularExpression)
                    }
                };
                out.value(&format!("{at}.path.value"), path)
            }
        };
        let method = match &raw.method {
            None => Some(None),
            Some(RawMethodMatch::Http(m)) => {
                let method = Method::parse(m).ok_or_else(|| {
                    let all: Vec<_> = Method::ALL.iter().map(|m| m.as_str()).collect();
                    format!("`{m}` is not a method a route matches: {}", all.join(", "))
                });
                out.value(&format!("{at}.method"), method).map(Some)
            }
            Some(RawMethodMatch::Grpc(_)) => {
                let message = "a gRPC method match (`{ service, method }`) on a service that \
                               speaks HTTP: write an HTTP method (`GET`), or `protocol: grpc`";
                out.error(&format!("{at}.method"), message.into());
                None
            }
        };
        let headers = header_matches(raw.headers.as_deref(), at, out);
        let query = values(
            raw.query_params.as_deref(),
            &format!("{at}.query_params"),
            out,
        )
        .map(|qs| {
            qs.into_iter()
                .map(|(name, value)| QueryMatch { name, value })
                .collect()
        });
        Some(Match {
            path: path?,
            headers: headers?,
            query_params: query?,
            method: method?,
        })
    }
}

impl MatchKind for GrpcMatch {
    const KIND: &'static str = "GRPCRoute";
    const TAKES_POLICY: bool = false;
    fn resolve(raw: &RawRouteMatch, at: &str, out: &mut Out<'_>) -> Option<Self> {
        let mut ok = true;
        for (field, written) in [
            ("path", raw.path.is_some()),
            ("query_params", raw.query_params.is_some()),
        ] {
            if written {
                let message = format!(
                    "a gRPC service's routes match its service and method (`method: {{ service, method }}`) and headers, not `{field}`"
                );
                out.error(&format!("{at}.{field}"), message);
                ok = false;
            }
        }
        let method = match &raw.method {
            None => Some(None),
            Some(RawMethodMatch::Http(m)) => {
                let message =
                    format!("`{m}`: a gRPC service's routes match `method: {{ service, method }}`");
                out.error(&format!("{at}.method"), message);
                None
            }
            Some(RawMethodMatch::Grpc(g)) => {
                let (s, m) = (g.service.as_deref(), g.method.as_deref());
                let built = match g.kind.unwrap_or(ValueMatchType::Exact) {
                    ValueMatchType::Exact => GrpcMethodMatch::exact(s, m),
                    ValueMatchType::RegularExpression => GrpcMethodMatch::regex(s, m),
                };
                out.value(&format!("{at}.method"), built).map(Some)
            }
        };
        let headers = header_matches(raw.headers.as_deref(), at, out);
        if !ok {
            return None;
        }
        Some(GrpcMatch {
            method: method?,
            headers: headers?,
        })
    }
}

fn header_matches(
    raw: Option<&[RawValueMatch]>,
    at: &str,
    out: &mut Out<'_>,
) -> Option<Vec<HeaderMatch>> {
    let at = format!("{at}.headers");
    let pairs = values(raw, &at, out)?;
    let matches: Vec<_> = (pairs.into_iter().enumerate())
        .map(|(i, (name, value))| {
            let name = out.value(&format!("{at}[{i}].name"), HeaderName::new(&name))?;
            Some(HeaderMatch { name, value })
        })
        .collect();
    // Every name checked (each problem reported) before giving up on the list.
    matches.into_iter().collect()
}

/// Each `{ type, name, value }`: the name as written and the value's comparison; `None` if any
/// was wrong (each reported).
fn values(
    raw: Option<&[RawValueMatch]>,
    at: &str,
    out: &mut Out<'_>,
) -> Option<Vec<(String, StringMatch)>> {
    let mut all = Some(Vec::new());
    for (i, v) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{at}[{i}]");
        let name = out.required(v.name.as_deref(), &at, "name");
        let value = out.required(v.value.as_deref(), &at, "value");
        let (Some(name), Some(value)) = (name, value) else {
            all = None;
            continue;
        };
        let m = match v.kind.unwrap_or(ValueMatchType::Exact) {
            ValueMatchType::Exact => HeaderValue::new(value).map(StringMatch::Exact),
            ValueMatchType::RegularExpression => {
                Pattern::new(value).map(StringMatch::RegularExpression)
            }
        };
        match (out.value(&format!("{at}.value"), m), all.as_mut()) {
            (Some(m), Some(list)) => list.push((name.to_owned(), m)),
            _ => all = None,
        }
    }
    all
}
