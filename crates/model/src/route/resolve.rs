//! A service's routes as written (`raw::RawServiceRoute`) made into the route model: HTTPRoutes
//! for an HTTP service, GRPCRoutes for a gRPC one. Every value checked by its constructor, the
//! rules that span fields by [`super::check`], backends and mirrors against the services of the
//! file; every problem reported at once, at its path in the file and its line.
//!
//! Only the conversion; matches are `resolve_match.rs`'s. Does not touch a call's routes
//! (`calls.<service>.routes`), and nothing here routes a request.

use indexmap::IndexMap;

use super::backend::{Backend, Target};
use super::check::{Checked, check};
use super::filter::{
    Filter, HeaderModifier, Mirror, PathModifier, Redirect, RedirectStatus, Rewrite, Scheme,
};
use super::resolve_match::{MatchKind, Out};
use super::values::{HeaderName, HeaderValue, Hostname, RoutePath};
use super::{GrpcRoute, Route, Rule, RulePolicy, RuleRetry};
use crate::diag::Diagnostic;
use crate::duration::GatewayDur;
use crate::policy::Protocol;
use crate::raw::{
    FilterType, PathModifierType, RawFilter, RawHeader, RawPathModifier, RawRouteRule, RawService,
    RawServiceRoute, RawTarget,
};
use crate::read::Locations;

/// A service's routes, by name, of the kind its protocol speaks.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceRoutes {
    Http(IndexMap<String, Route>),
    Grpc(IndexMap<String, GrpcRoute>),
}

impl Default for ServiceRoutes {
    fn default() -> Self {
        Self::Http(IndexMap::new())
    }
}

impl ServiceRoutes {
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Http(r) => r.is_empty(),
            Self::Grpc(r) => r.is_empty(),
        }
    }

    /// Whether a route is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Self::Http(r) => r.contains_key(name),
            Self::Grpc(r) => r.contains_key(name),
        }
    }
}

/// `services.<service>.routes`, resolved; what cannot be is left out, with its problem.
pub(crate) fn resolve(
    rs: &RawService,
    service: &str,
    services: &IndexMap<String, RawService>,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> ServiceRoutes {
    let mut out = Out {
        services,
        locations,
        diags,
    };
    match rs.protocol.unwrap_or(Protocol::Http) {
        Protocol::Http => ServiceRoutes::Http(routes(rs, service, &mut out)),
        Protocol::Grpc => ServiceRoutes::Grpc(routes(rs, service, &mut out)),
    }
}

fn routes<M: MatchKind + Checked>(
    rs: &RawService,
    service: &str,
    out: &mut Out<'_>,
) -> IndexMap<String, Route<M>> {
    rs.routes
        .iter()
        .map(|(name, raw)| {
            let at = format!("services.{service}.routes.{name}");
            (name.clone(), route(raw, &at, out))
        })
        .collect()
}

fn route<M: MatchKind + Checked>(raw: &RawServiceRoute, at: &str, out: &mut Out<'_>) -> Route<M> {
    let hostnames = raw.hostnames.iter().flatten().enumerate();
    let route = Route {
        hostnames: hostnames
            .filter_map(|(i, h)| out.value(&format!("{at}.hostnames[{i}]"), Hostname::new(h)))
            .collect(),
        rules: (raw.rules.iter().flatten().enumerate())
            .map(|(i, r)| {
                let at = format!("{at}.rules[{i}]");
                let list = |n: &str| format!("{at}.{n}");
                Rule {
                    name: r.name.clone(),
                    matches: (r.matches.iter().flatten().enumerate())
                        .filter_map(|(j, m)| {
                            M::resolve(m, &format!("{}[{j}]", list("matches")), out)
                        })
                        .collect(),
                    filters: (r.filters.iter().flatten().enumerate())
                        .filter_map(|(j, f)| filter(f, &format!("{}[{j}]", list("filters")), out))
                        .collect(),
                    backends: (r.backends.iter().flatten().enumerate())
                        .filter_map(|(j, b)| {
                            let at = format!("{}[{j}]", list("backends"));
                            let target = target(&b.target, &at, out)?;
                            Some(Backend {
                                target,
                                weight: b.weight.unwrap_or(1),
                            })
                        })
                        .collect(),
                    policy: rule_policy::<M>(r, &at, out),
                }
            })
            .collect(),
    };
    for p in check(&route) {
        out.error(&format!("{at}.{}", p.at), p.message);
    }
    route
}

/// A rule's `timeouts` and `retry` (HTTPRoute only), with the spec's one rule between fields:
/// `backend_request` is at most `request`. `0s` switches a timeout off, as the spec says.
fn rule_policy<M: MatchKind>(
    raw: &RawRouteRule,
    at: &str,
    out: &mut Out<'_>,
) -> Option<RulePolicy> {
    if raw.timeouts.is_none() && raw.retry.is_none() {
        return None;
    }
    if !M::TAKES_POLICY {
        for (field, written) in [
            ("timeouts", raw.timeouts.is_some()),
            ("retry", raw.retry.is_some()),
        ] {
            if written {
                let kind = M::KIND;
                out.error(
                    &format!("{at}.{field}"),
                    format!(
                        "a {kind} has no `{field}`: give the call its policy (`calls.<service>`)"
                    ),
                );
            }
        }
        return None;
    }
    let off = |d: GatewayDur| Some(d.0).filter(|d| !d.0.is_zero());
    let t = raw.timeouts.as_ref();
    let timeout = t.and_then(|t| t.request).map(off);
    let per_try_timeout = t.and_then(|t| t.backend_request).map(off);
    if let (Some(Some(request)), Some(Some(per_try))) = (timeout, per_try_timeout)
        && per_try > request
    {
        out.error(
            &format!("{at}.timeouts.backend_request"),
            format!("{per_try} is longer than `request` ({request}): one try cannot outlast every try together (the Gateway API asks backendRequest ≤ request)"),
        );
    }
    Some(RulePolicy {
        timeout,
        per_try_timeout,
        retry: raw.retry.as_ref().map(|r| RuleRetry {
            attempts: r.attempts,
            backoff: r.backoff.map(|b| b.0),
            codes: r.codes.clone(),
        }),
    })
}

fn filter(raw: &RawFilter, at: &str, out: &mut Out<'_>) -> Option<Filter> {
    let modifier = |m: &crate::raw::RawHeaderModifier, at: &str, out: &mut Out<'_>| {
        let pairs = |list: &Option<Vec<RawHeader>>, name: &str, out: &mut Out<'_>| {
            (list.iter().flatten().enumerate())
                .filter_map(|(i, h)| {
                    let at = format!("{at}.{name}[{i}]");
                    let name = out.required(h.name.as_deref(), &at, "name");
                    let value = out.required(h.value.as_deref(), &at, "value");
                    let n = out.value(&format!("{at}.name"), HeaderName::new(name?));
                    let v = out.value(&format!("{at}.value"), HeaderValue::new(value?));
                    Some((n?, v?))
                })
                .collect()
        };
        HeaderModifier {
            set: pairs(&m.set, "set", out),
            add: pairs(&m.add, "add", out),
            remove: (m.remove.iter().flatten().enumerate())
                .filter_map(|(i, n)| out.value(&format!("{at}.remove[{i}]"), HeaderName::new(n)))
                .collect(),
        }
    };
    Some(match raw.kind? {
        FilterType::RequestHeaderModifier => {
            let at = format!("{at}.request_header_modifier");
            Filter::RequestHeaderModifier(modifier(raw.request_header_modifier.as_ref()?, &at, out))
        }
        FilterType::ResponseHeaderModifier => {
            let at = format!("{at}.response_header_modifier");
            Filter::ResponseHeaderModifier(modifier(
                raw.response_header_modifier.as_ref()?,
                &at,
                out,
            ))
        }
        FilterType::RequestRedirect => {
            let r = raw.request_redirect.as_ref()?;
            let at = format!("{at}.request_redirect");
            let scheme = match r.scheme.as_deref() {
                None => None,
                Some("http") => Some(Scheme::Http),
                Some("https") => Some(Scheme::Https),
                Some(other) => {
                    out.error(
                        &format!("{at}.scheme"),
                        format!("a redirect's scheme is `http` or `https`, not `{other}`"),
                    );
                    None
                }
            };
            if r.port == Some(0) {
                out.error(
                    &format!("{at}.port"),
                    "port 0 is not a port: write one from 1 to 65535".into(),
                );
            }
            Filter::RequestRedirect(Redirect {
                scheme,
                hostname: hostname(r.hostname.as_deref(), &at, out),
                port: r.port.filter(|p| *p != 0),
                path: r.path.as_ref().and_then(|p| path_modifier(p, &at, out)),
                status: match r.status_code {
                    None => RedirectStatus::default(),
                    Some(c) => {
                        out.value(&format!("{at}.status_code"), RedirectStatus::from_code(c))?
                    }
                },
            })
        }
        FilterType::UrlRewrite => {
            let r = raw.url_rewrite.as_ref()?;
            let at = format!("{at}.url_rewrite");
            Filter::UrlRewrite(Rewrite {
                hostname: hostname(r.hostname.as_deref(), &at, out),
                path: r.path.as_ref().and_then(|p| path_modifier(p, &at, out)),
            })
        }
        FilterType::RequestMirror => {
            let m = raw.request_mirror.as_ref()?;
            let at = format!("{at}.request_mirror");
            let Some(t) = &m.backend else {
                out.error(&at, "a mirror names its `backend`".into());
                return None;
            };
            Filter::RequestMirror(Mirror {
                target: target(t, &format!("{at}.backend"), out)?,
                percent: m.percent.unwrap_or(100),
            })
        }
    })
}

fn hostname(name: Option<&str>, at: &str, out: &mut Out<'_>) -> Option<Hostname> {
    out.value(&format!("{at}.hostname"), Hostname::new(name?))
}

fn path_modifier(raw: &RawPathModifier, at: &str, out: &mut Out<'_>) -> Option<PathModifier> {
    let at = format!("{at}.path");
    let (field, value) = match raw.kind {
        Some(PathModifierType::ReplaceFullPath) => ("replace_full_path", &raw.replace_full_path),
        Some(PathModifierType::ReplacePrefixMatch) => {
            ("replace_prefix_match", &raw.replace_prefix_match)
        }
        None => {
            out.error(
                &at,
                "a path modifier names its `type`: ReplaceFullPath or ReplacePrefixMatch".into(),
            );
            return None;
        }
    };
    let path = out.required(value.as_deref(), &at, field)?;
    let path = out.value(&format!("{at}.{field}"), RoutePath::new(path))?;
    Some(match raw.kind? {
        PathModifierType::ReplaceFullPath => PathModifier::ReplaceFullPath(path),
        PathModifierType::ReplacePrefixMatch => PathModifier::ReplacePrefixMatch(path),
    })
}

/// A backend's or mirror's target: a service of the file.
fn target(raw: &RawTarget, at: &str, out: &mut Out<'_>) -> Option<Target> {
    let service = out.required(raw.service.as_deref(), at, "service")?;
    if !out.services.contains_key(service) {
        out.error(
            &format!("{at}.service"),
            format!("no service `{service}` in the file"),
        );
        return None;
    }
    Some(Target {
        service: service.to_owned(),
        subset: raw
            .subset
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}
