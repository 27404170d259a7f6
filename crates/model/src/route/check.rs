//! What a route must be beyond its values: the Gateway API's bounds (16 hostnames, rules,
//! filters and backends, 64 matches, 16 headers and query parameters), rule names unique and
//! well formed, names unique within each list, the filters that may stand together (each once
//! but mirrors, never a redirect with a rewrite, neither in a GRPCRoute), a `ReplacePrefixMatch`
//! only under a single `PathPrefix` match, precise hostnames in redirects and rewrites, weights
//! and percentages in range.
//!
//! Returns every problem at once, each with where it stands relative to the route
//! (`rules[1].filters[0].request_redirect.hostname`, the mesh file's path), for the reader to prefix with the route's
//! own path and line. Reads nothing, decides nothing about requests.

use std::collections::HashSet;

use super::backend::{Backend, Target};
use super::filter::{Filter, PathModifier};
use super::matches::{GrpcMatch, HeaderMatch, Match, PathMatch};
use super::{Route, Rule};

/// One thing wrong with a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, relative to the route (`rules[0].matches[2].headers`); empty for the route.
    pub at: String,
    pub message: String,
}

/// The match-kind-specific part of the checks.
pub trait Checked {
    /// `HTTPRoute` or `GRPCRoute`, for messages.
    const KIND: &'static str;
    /// Whether redirects and rewrites belong to this kind of route.
    const REDIRECTS: bool;
    fn check(&self, at: &str, out: &mut Vec<Problem>);
    /// Whether this is a `PathPrefix` match (what `ReplacePrefixMatch` needs).
    fn is_prefix(&self) -> bool;
}

const MAX_ITEMS: usize = 16;
const MAX_MATCHES: usize = 64;

/// Every problem of `route`, in order.
pub fn check<M: Checked>(route: &Route<M>) -> Vec<Problem> {
    let mut out = Vec::new();
    at_most(&mut out, "hostnames", route.hostnames.len(), MAX_ITEMS);
    at_most(&mut out, "rules", route.rules.len(), MAX_ITEMS);
    let mut names = HashSet::new();
    for (i, rule) in route.rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        if let Some(name) = &rule.name {
            if !section_name(name) {
                problem(
                    &mut out,
                    format!("{at}.name"),
                    format!(
                        "`{name}` is not a rule name: lower-case letters, digits and `-`, at most 253, \
                     starting and ending with a letter or digit"
                    ),
                );
            } else if !names.insert(name.as_str()) {
                problem(
                    &mut out,
                    format!("{at}.name"),
                    format!("a second rule named `{name}`"),
                );
            }
        }
        check_rule(rule, &at, &mut out);
    }
    out
}

fn check_rule<M: Checked>(rule: &Rule<M>, at: &str, out: &mut Vec<Problem>) {
    at_most(
        out,
        &format!("{at}.matches"),
        rule.matches.len(),
        MAX_MATCHES,
    );
    for (j, m) in rule.matches.iter().enumerate() {
        m.check(&format!("{at}.matches[{j}]"), out);
    }
    at_most(out, &format!("{at}.filters"), rule.filters.len(), MAX_ITEMS);
    let mut seen = HashSet::new();
    for (j, f) in rule.filters.iter().enumerate() {
        let at = format!("{at}.filters[{j}]");
        let kind = f.kind();
        if !matches!(f, Filter::RequestMirror(_)) && !seen.insert(kind) {
            problem(
                out,
                at.clone(),
                format!("a second {kind}: each filter but RequestMirror stands once"),
            );
        }
        check_filter::<M>(f, rule, &at, out);
    }
    if seen.contains("RequestRedirect") && seen.contains("URLRewrite") {
        problem(
            out,
            format!("{at}.filters"),
            "a rule may redirect or rewrite, not both".into(),
        );
    }
    at_most(
        out,
        &format!("{at}.backends"),
        rule.backends.len(),
        MAX_ITEMS,
    );
    for (j, b) in rule.backends.iter().enumerate() {
        check_backend(b, &format!("{at}.backends[{j}]"), out);
    }
}

fn check_filter<M: Checked>(f: &Filter, rule: &Rule<M>, at: &str, out: &mut Vec<Problem>) {
    let kind_at = at;
    let at = &format!("{at}.{}", f.field());
    let (path, hostname) = match f {
        Filter::RequestHeaderModifier(h) | Filter::ResponseHeaderModifier(h) => {
            unique(
                out,
                &format!("{at}.set"),
                h.set.iter().map(|(n, _)| n.as_str()),
            );
            unique(
                out,
                &format!("{at}.add"),
                h.add.iter().map(|(n, _)| n.as_str()),
            );
            unique(
                out,
                &format!("{at}.remove"),
                h.remove.iter().map(|n| n.as_str()),
            );
            for (list, len) in [
                ("set", h.set.len()),
                ("add", h.add.len()),
                ("remove", h.remove.len()),
            ] {
                at_most(out, &format!("{at}.{list}"), len, MAX_ITEMS);
            }
            return;
        }
        Filter::RequestMirror(m) => {
            if m.percent > 100 {
                problem(
                    out,
                    format!("{at}.percent"),
                    format!("a percentage is 0 to 100, not {}", m.percent),
                );
            }
            check_target(&m.target, &format!("{at}.backend"), out);
            return;
        }
        Filter::RequestRedirect(r) => (&r.path, &r.hostname),
        Filter::UrlRewrite(r) => (&r.path, &r.hostname),
    };
    if !M::REDIRECTS {
        problem(
            out,
            kind_at.to_owned(),
            format!("a {} has no {} filter", M::KIND, f.kind()),
        );
    }
    if hostname.as_ref().is_some_and(|h| h.is_wildcard()) {
        problem(
            out,
            format!("{at}.hostname"),
            "a redirect or rewrite names one host, not `*.`".into(),
        );
    }
    // No match is the spec's default, one `PathPrefix /`.
    let single_prefix =
        rule.matches.is_empty() || (rule.matches.len() == 1 && rule.matches[0].is_prefix());
    if matches!(path, Some(PathModifier::ReplacePrefixMatch(_))) && !single_prefix {
        problem(
            out,
            format!("{at}.path"),
            "ReplacePrefixMatch needs a rule with exactly one match, a PathPrefix".into(),
        );
    }
}

fn check_backend(b: &Backend, at: &str, out: &mut Vec<Problem>) {
    if b.weight > Backend::MAX_WEIGHT {
        problem(
            out,
            format!("{at}.weight"),
            format!(
                "a weight is at most {}, not {}",
                Backend::MAX_WEIGHT,
                b.weight
            ),
        );
    }
    check_target(&b.target, at, out);
}

fn check_target(t: &Target, at: &str, out: &mut Vec<Problem>) {
    if t.service.is_empty() {
        problem(
            out,
            format!("{at}.service"),
            "a backend names a service".into(),
        );
    }
    if t.subset.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
        problem(
            out,
            format!("{at}.subset"),
            "a label's name and value cannot be empty".into(),
        );
    }
}

impl Checked for Match {
    const KIND: &'static str = "HTTPRoute";
    const REDIRECTS: bool = true;

    fn check(&self, at: &str, out: &mut Vec<Problem>) {
        check_headers(&self.headers, at, out);
        at_most(
            out,
            &format!("{at}.query_params"),
            self.query_params.len(),
            MAX_ITEMS,
        );
        unique(
            out,
            &format!("{at}.query_params"),
            self.query_params.iter().map(|q| q.name.as_str()),
        );
        for (k, q) in self.query_params.iter().enumerate() {
            if q.name.is_empty()
                || q.name.contains(['&', '=', '#'])
                || q.name.chars().any(|c| c.is_control())
            {
                problem(
                    out,
                    format!("{at}.query_params[{k}].name"),
                    format!(
                        "`{}` is not a query parameter name (empty, or holds `&`, `=`, `#` or a control character)",
                        q.name.escape_debug()
                    ),
                );
            }
        }
    }

    fn is_prefix(&self) -> bool {
        matches!(self.path, PathMatch::PathPrefix(_))
    }
}

impl Checked for GrpcMatch {
    const KIND: &'static str = "GRPCRoute";
    const REDIRECTS: bool = false;

    fn check(&self, at: &str, out: &mut Vec<Problem>) {
        check_headers(&self.headers, at, out);
    }

    fn is_prefix(&self) -> bool {
        false
    }
}

fn check_headers(headers: &[HeaderMatch], at: &str, out: &mut Vec<Problem>) {
    at_most(out, &format!("{at}.headers"), headers.len(), MAX_ITEMS);
    unique(
        out,
        &format!("{at}.headers"),
        headers.iter().map(|h| h.name.as_str()),
    );
}

fn unique<'a>(out: &mut Vec<Problem>, at: &str, names: impl Iterator<Item = &'a str>) {
    let mut seen = HashSet::new();
    for n in names {
        if !seen.insert(n) {
            problem(out, at.to_owned(), format!("`{n}` is named twice"));
        }
    }
}

fn at_most(out: &mut Vec<Problem>, at: &str, len: usize, max: usize) {
    if len > max {
        problem(out, at.to_owned(), format!("at most {max} here, not {len}"));
    }
}

fn problem(out: &mut Vec<Problem>, at: String, message: String) {
    out.push(Problem { at, message });
}

/// The Gateway API's SectionName: an RFC 1123 subdomain-like word.
fn section_name(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 253
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter().all(|c| edge(c) || *c == b'-' || *c == b'.')
}
