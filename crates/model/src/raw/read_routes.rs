//! The reader of `services.<name>.routes` (`routes.rs`'s types): YAML tree → raw routes, every
//! problem collected with its path and line (a wrong type, an unknown field with "did you
//! mean", a filter whose field is not its `type`'s). What the values mean is checked later,
//! in `crate::route::resolve`.

use super::routes::{
    FilterType, PathMatchType, PathModifierType, RawBackend, RawFilter, RawGrpcMethod, RawHeader,
    RawHeaderModifier, RawMethodMatch, RawMirror, RawPathMatch, RawPathModifier, RawRedirect,
    RawRewrite, RawRouteMatch, RawRouteRule, RawServiceRoute, RawTarget, RawValueMatch,
    ValueMatchType,
};
use super::rule_policy::{read_retry, read_timeouts};
use super::values::u32_field;
use crate::read::{Fields, Reader};
use crate::yaml::{Node, Value};

const PATH_TYPES: [(&str, PathMatchType); 3] = [
    ("Exact", PathMatchType::Exact),
    ("PathPrefix", PathMatchType::PathPrefix),
    ("RegularExpression", PathMatchType::RegularExpression),
];
const VALUE_TYPES: [(&str, ValueMatchType); 2] = [
    ("Exact", ValueMatchType::Exact),
    ("RegularExpression", ValueMatchType::RegularExpression),
];
const FILTER_TYPES: [(&str, FilterType, &str); 5] = [
    (
        "RequestHeaderModifier",
        FilterType::RequestHeaderModifier,
        "request_header_modifier",
    ),
    (
        "ResponseHeaderModifier",
        FilterType::ResponseHeaderModifier,
        "response_header_modifier",
    ),
    (
        "RequestRedirect",
        FilterType::RequestRedirect,
        "request_redirect",
    ),
    ("URLRewrite", FilterType::UrlRewrite, "url_rewrite"),
    ("RequestMirror", FilterType::RequestMirror, "request_mirror"),
];
const MODIFIER_TYPES: [(&str, PathModifierType); 2] = [
    ("ReplaceFullPath", PathModifierType::ReplaceFullPath),
    ("ReplacePrefixMatch", PathModifierType::ReplacePrefixMatch),
];

/// `services.<name>.routes.<route>`.
pub(super) fn read_route(r: &mut Reader, n: &Node, p: &str) -> Option<RawServiceRoute> {
    let mut f = r.fields(n, p)?;
    let route = RawServiceRoute {
        hostnames: f.get(r, "hostnames", |r, n, p| r.list(n, p, Reader::string)),
        rules: f.get(r, "rules", |r, n, p| r.list(n, p, read_rule)),
    };
    f.finish(r);
    Some(route)
}

fn read_rule(r: &mut Reader, n: &Node, p: &str) -> Option<RawRouteRule> {
    let mut f = r.fields(n, p)?;
    let rule = RawRouteRule {
        name: f.get(r, "name", Reader::string),
        matches: f.get(r, "matches", |r, n, p| r.list(n, p, read_match)),
        filters: f.get(r, "filters", |r, n, p| r.list(n, p, read_filter)),
        backends: f.get(r, "backends", |r, n, p| r.list(n, p, read_backend)),
        timeouts: f.get(r, "timeouts", read_timeouts),
        retry: f.get(r, "retry", read_retry),
    };
    f.finish(r);
    Some(rule)
}

fn read_match(r: &mut Reader, n: &Node, p: &str) -> Option<RawRouteMatch> {
    let mut f = r.fields(n, p)?;
    let m = RawRouteMatch {
        path: f.get(r, "path", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let path = RawPathMatch {
                kind: f.get(r, "type", |r, n, p| r.word(n, p, &PATH_TYPES)),
                value: f.get(r, "value", Reader::string),
            };
            f.finish(r);
            Some(path)
        }),
        headers: f.get(r, "headers", |r, n, p| r.list(n, p, read_value_match)),
        query_params: f.get(r, "query_params", |r, n, p| r.list(n, p, read_value_match)),
        method: f.get(r, "method", |r, n, p| match &n.value {
            Value::Map(_) => {
                let mut f = r.fields(n, p)?;
                let m = RawGrpcMethod {
                    kind: value_type(r, &mut f),
                    service: f.get(r, "service", Reader::string),
                    method: f.get(r, "method", Reader::string),
                };
                f.finish(r);
                Some(RawMethodMatch::Grpc(m))
            }
            _ => r.string(n, p).map(RawMethodMatch::Http),
        }),
    };
    f.finish(r);
    Some(m)
}

fn value_type(r: &mut Reader, f: &mut Fields<'_>) -> Option<ValueMatchType> {
    f.get(r, "type", |r, n, p| r.word(n, p, &VALUE_TYPES))
}

fn read_value_match(r: &mut Reader, n: &Node, p: &str) -> Option<RawValueMatch> {
    let mut f = r.fields(n, p)?;
    let m = RawValueMatch {
        kind: value_type(r, &mut f),
        name: f.get(r, "name", Reader::string),
        value: f.get(r, "value", Reader::string),
    };
    f.finish(r);
    Some(m)
}

fn read_filter(r: &mut Reader, n: &Node, p: &str) -> Option<RawFilter> {
    let mut f = r.fields(n, p)?;
    let kind = f.get(r, "type", |r, n, p| {
        let words = FILTER_TYPES.map(|(w, t, _)| (w, t));
        r.word(n, p, &words)
    });
    let Some(kind) = kind else {
        if !r.locations.written(&format!("{p}.type")) {
            r.error(p, n.pos, "a filter names its `type`: RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect, URLRewrite or RequestMirror");
        }
        return None;
    };
    let mut filter = RawFilter {
        kind: Some(kind),
        ..RawFilter::default()
    };
    // Only the field of the filter's type is read; another is an unknown field.
    let key = FILTER_TYPES
        .iter()
        .find(|(_, t, _)| *t == kind)
        .map_or("", |(_, _, key)| key);
    let given = match kind {
        FilterType::RequestHeaderModifier => {
            filter.request_header_modifier = f.get(r, key, read_modifier);
            filter.request_header_modifier.is_some()
        }
        FilterType::ResponseHeaderModifier => {
            filter.response_header_modifier = f.get(r, key, read_modifier);
            filter.response_header_modifier.is_some()
        }
        FilterType::RequestRedirect => {
            filter.request_redirect = f.get(r, key, read_redirect);
            filter.request_redirect.is_some()
        }
        FilterType::UrlRewrite => {
            filter.url_rewrite = f.get(r, key, read_rewrite);
            filter.url_rewrite.is_some()
        }
        FilterType::RequestMirror => {
            filter.request_mirror = f.get(r, key, read_mirror);
            filter.request_mirror.is_some()
        }
    };
    if !given && !r.locations.written(&format!("{p}.{key}")) {
        r.error(p, n.pos, format!("a filter of this type holds `{key}`"));
    }
    f.finish(r);
    Some(filter)
}

fn read_modifier(r: &mut Reader, n: &Node, p: &str) -> Option<RawHeaderModifier> {
    let mut f = r.fields(n, p)?;
    let header = |r: &mut Reader, n: &Node, p: &str| {
        let mut f = r.fields(n, p)?;
        let h = RawHeader {
            name: f.get(r, "name", Reader::string),
            value: f.get(r, "value", Reader::string),
        };
        f.finish(r);
        Some(h)
    };
    let m = RawHeaderModifier {
        set: f.get(r, "set", |r, n, p| r.list(n, p, header)),
        add: f.get(r, "add", |r, n, p| r.list(n, p, header)),
        remove: f.get(r, "remove", |r, n, p| r.list(n, p, Reader::string)),
    };
    f.finish(r);
    Some(m)
}

fn read_redirect(r: &mut Reader, n: &Node, p: &str) -> Option<RawRedirect> {
    let mut f = r.fields(n, p)?;
    let redirect = RawRedirect {
        scheme: f.get(r, "scheme", Reader::string),
        hostname: f.get(r, "hostname", Reader::string),
        port: f.get(r, "port", |r, n, p| {
            r.count(n, p, u16::MAX.into()).map(|v| v as u16)
        }),
        path: f.get(r, "path", read_path_modifier),
        status_code: f.get(r, "status_code", |r, n, p| {
            r.count(n, p, 999).map(|v| v as u16)
        }),
    };
    f.finish(r);
    Some(redirect)
}

fn read_rewrite(r: &mut Reader, n: &Node, p: &str) -> Option<RawRewrite> {
    let mut f = r.fields(n, p)?;
    let rewrite = RawRewrite {
        hostname: f.get(r, "hostname", Reader::string),
        path: f.get(r, "path", read_path_modifier),
    };
    f.finish(r);
    Some(rewrite)
}

fn read_path_modifier(r: &mut Reader, n: &Node, p: &str) -> Option<RawPathModifier> {
    let mut f = r.fields(n, p)?;
    let m = RawPathModifier {
        kind: f.get(r, "type", |r, n, p| r.word(n, p, &MODIFIER_TYPES)),
        replace_full_path: f.get(r, "replace_full_path", Reader::string),
        replace_prefix_match: f.get(r, "replace_prefix_match", Reader::string),
    };
    f.finish(r);
    Some(m)
}

fn read_mirror(r: &mut Reader, n: &Node, p: &str) -> Option<RawMirror> {
    let mut f = r.fields(n, p)?;
    let m = RawMirror {
        backend: f.get(r, "backend", |r, n, p| {
            let mut f = r.fields(n, p)?;
            let t = read_target(r, &mut f);
            f.finish(r);
            Some(t)
        }),
        percent: f.get(r, "percent", |r, n, p| r.count(n, p, 100).map(|v| v as u8)),
    };
    f.finish(r);
    Some(m)
}

fn read_target(r: &mut Reader, f: &mut Fields<'_>) -> RawTarget {
    RawTarget {
        service: f.get(r, "service", Reader::string),
        subset: f.get(r, "subset", Reader::labels),
    }
}

fn read_backend(r: &mut Reader, n: &Node, p: &str) -> Option<RawBackend> {
    let mut f = r.fields(n, p)?;
    let b = RawBackend {
        target: read_target(r, &mut f),
        weight: f.get(r, "weight", u32_field),
    };
    f.finish(r);
    Some(b)
}
