//! The translation and the calls → a hopwise mesh file (text), and the map from each field it
//! writes back to the input. Policy is written per call, as each caller's proxy applies it:
//! the destination's caps on the call, the route policy on the call when the host has one
//! route that matches everything, else one hopwise route per route of the host. What the
//! input leaves out is not written, so the mesh's preset (`defaults.preset`) supplies it.
//! Istio's mesh-wide default retry policy goes on each route that writes no `retries`;
//! [`write_edited`] writes fixes over what the input says (the second file, [`crate::fixed`]).
//! The fields of one call or route are written by `fields.rs`.

use std::fmt::Write as _;

use hopwise_model::Protocol;
use indexmap::IndexMap;

use crate::calls::Calls;
use crate::fixed::{self, Edit};
use crate::ir::{Destination, Flavor, Route, Skipped, Translation};
use crate::node::At;
use crate::origins::{CallOrigin, Origins};
use crate::problem::Problem;

mod fields;
use fields::{destination, dur, policy};

/// Choices the input cannot make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assume {
    pub name: String,
    pub flavor: Flavor,
    /// Back-off as the seed's checker counts it: the same 25 ms before every retry.
    pub fixed_backoff: bool,
    /// The input files, named in the header.
    pub inputs: Vec<String>,
    /// More header lines (the second file's list of fixes).
    pub header: Vec<String>,
}

struct W<'e> {
    out: String,
    origins: Origins,
    written: Written,
    /// Fixes to write over what the input says ([`crate::fixed`]).
    edits: &'e [Edit],
}

/// What writing found beside the text.
#[derive(Debug, Default)]
pub struct Written {
    /// Fields read but not kept, and why.
    pub skipped: Vec<Skipped>,
    /// What the reader should know about how a figure is counted.
    pub notes: Vec<String>,
    /// A call's `route=` naming no route of its callee.
    pub problems: Vec<Problem>,
}

impl<'e> W<'e> {
    fn edits(&self, path: &str) -> Vec<&'e Edit> {
        self.edits.iter().filter(|e| e.call == path).collect()
    }

    fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{:indent$}{text}", "");
    }

    fn field(&mut self, indent: usize, path: &str, key: &str, value: &str, at: Option<&At>) {
        self.line(indent, &format!("{key}: {value}"));
        if let Some(at) = at {
            self.origins
                .fields
                .insert(format!("{path}.{key}"), at.clone());
        }
    }
}

/// Writes the file, with the map back and what writing found.
pub fn write(t: &Translation, calls: &Calls, a: &Assume) -> (String, Origins, Written) {
    write_edited(t, calls, a, &[])
}

/// Writes the file with `edits` over what the input says.
pub fn write_edited(
    t: &Translation,
    calls: &Calls,
    a: &Assume,
    edits: &[Edit],
) -> (String, Origins, Written) {
    let mut w = W {
        edits,
        out: String::new(),
        origins: Origins {
            flavor: a.flavor,
            fields: IndexMap::new(),
            blocks: IndexMap::new(),
            calls: IndexMap::new(),
            services: IndexMap::new(),
        },
        written: Written::default(),
    };
    w.line(
        0,
        &format!(
            "# Written by `hopwise convert` from {}.",
            a.inputs.join(", ")
        ),
    );
    w.line(
        0,
        &format!(
            "# What they leave out takes {}'s defaults: the `{}` preset.",
            name(a.flavor),
            a.flavor.preset()
        ),
    );
    for h in &a.header {
        w.line(0, &format!("# {h}"));
    }
    w.line(0, "mesh:");
    w.line(2, &format!("name: {}", quote(&a.name)));
    w.line(0, "defaults:");
    w.line(2, &format!("preset: {}", a.flavor.preset()));
    if a.fixed_backoff {
        w.line(
            2,
            "# assumed: the same 25 ms before every retry, as the seed's timeout checker counts",
        );
        w.line(2, "retries: { backoff: { strategy: fixed, base: 25ms } }");
    }
    let mut services: Vec<&str> = Vec::new();
    for c in &calls.calls {
        for s in [&c.from, &c.to] {
            if !services.contains(&s.as_str()) {
                services.push(s);
            }
        }
    }
    for e in &calls.entries {
        if !services.contains(&e.service.as_str()) {
            services.push(&e.service);
        }
    }
    // Istio's mesh-wide default applies route by route, where a route says nothing of retries.
    let default = t
        .mesh_default
        .as_ref()
        .filter(|_| a.flavor == Flavor::Istio);
    w.line(0, "services:");
    for s in &services {
        let path = format!("services.{s}");
        w.line(2, &format!("{s}:"));
        if let Some(p) = t.hosts.get(*s).and_then(|h| h.protocol.as_ref())
            && p.value == Protocol::Grpc
        {
            w.field(4, &path, "protocol", "grpc", Some(&p.at));
        }
        if let Some(e) = calls.entries.iter().rev().find(|e| e.service == *s) {
            let mut parts = vec![format!("timeout: {}", dur(e.timeout))];
            if let Some(r) = e.retries {
                parts.push(format!("retries: {r}"));
            }
            w.line(4, &format!("entry: {{ {} }}", parts.join(", ")));
            w.origins
                .services
                .insert(format!("{path}.entry"), e.at.clone());
            w.origins.services.insert(path.clone(), e.at.clone());
        }
        let out: Vec<_> = calls.calls.iter().filter(|c| c.from == *s).collect();
        if out.is_empty() {
            continue;
        }
        w.line(4, "calls:");
        let mut done: Vec<&str> = Vec::new();
        for c in out {
            if done.contains(&c.to.as_str()) {
                continue;
            }
            done.push(&c.to);
            call(&mut w, t, default, c, &format!("{path}.calls.{}", c.to));
        }
    }
    (w.out, w.origins, w.written)
}

fn name(f: Flavor) -> &'static str {
    match f {
        Flavor::Istio => "Istio",
        Flavor::Linkerd => "Linkerd",
    }
}

/// A string YAML reads back as itself.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn call(w: &mut W, t: &Translation, default: Option<&Route>, c: &crate::calls::Call, path: &str) {
    let host = t.hosts.get(&c.to);
    w.line(6, &format!("{}:", c.to));
    let request = |w: &mut W| {
        if let Some(p) = c.protocol {
            let v = if p == Protocol::Grpc { "grpc" } else { "http" };
            w.field(8, path, "protocol", v, Some(&c.at));
        }
        if let Some(m) = &c.method {
            w.field(8, path, "method", &quote(m), Some(&c.at));
        }
        if let Some(i) = c.idempotent {
            w.field(8, path, "idempotent", &i.to_string(), Some(&c.at));
        }
        if let Some(r) = c.app_retries {
            w.field(8, path, "app_retries", &r.to_string(), Some(&c.at));
        }
    };
    request(w);
    let dest = host.and_then(|h| h.destination.as_ref());
    let base = host.and_then(|h| h.base.as_ref());
    let all = host.map_or(&[][..], |h| h.routes.as_slice());
    let mut taken: Vec<String> = Vec::new();
    for (i, r) in all.iter().enumerate() {
        taken.push(route_name(r.name.as_deref(), i, &taken));
    }
    let chosen: Vec<(String, Route)> = taken
        .iter()
        .cloned()
        .zip(all.iter().map(|r| with_default(r, default)))
        .filter(|(n, _)| c.routes.as_ref().is_none_or(|only| only.contains(n)))
        .collect();
    for want in c.routes.iter().flatten() {
        if !taken.contains(want) {
            w.written.problems.push(Problem {
                file: c.at.file.clone(),
                pos: Some(c.at.pos),
                object: None,
                message: format!(
                    "`route={want}`: {} has no such route (its routes: {})",
                    c.to,
                    if taken.is_empty() {
                        "none".to_owned()
                    } else {
                        taken.join(", ")
                    }
                ),
            });
        }
    }
    if chosen.len() > 1 && c.routes.is_none() {
        w.written.notes.push(format!(
            "{} → {}: its {} routes are each counted as a request of their own (an upper bound where a request takes one of them); name the ones it uses with route=NAME in the calls file ({}:{})",
            c.from,
            c.to,
            chosen.len(),
            c.at.file,
            c.at.pos.line
        ));
    }
    let routes: Vec<&Route> = chosen.iter().map(|(_, r)| r).collect();
    let origin = |policy: Option<&At>, destination: Option<&At>| CallOrigin {
        call: c.at.clone(),
        policy: policy.cloned(),
        destination: destination.cloned(),
        callee: c.to.clone(),
    };
    match routes.as_slice() {
        [one] if one.path.is_none() && one.method.is_none() => {
            let edits = w.edits(path);
            let d = fixed::destination(subset(host, one).or(dest), &edits, &c.at);
            if let Some(d) = &d {
                destination(w, 8, path, d);
            }
            let merged = base.map_or_else(|| (*one).clone(), |b| over(b, one));
            if let Some(merged) = fixed::route(Some(merged), &edits, &c.at) {
                policy(w, 8, path, &merged);
            }
            let o = origin(Some(&one.holder), d.as_ref().map(|d| &d.holder));
            w.origins.calls.insert(path.to_owned(), o);
        }
        _ => {
            let edits = w.edits(path);
            if let Some(d) = fixed::destination(dest, &edits, &c.at) {
                destination(w, 8, path, &d);
            }
            let own = match (base, default) {
                (Some(b), _) => Some(b.clone()),
                // No route names the host: Istio's default route, with the mesh's retries.
                (None, Some(d)) if routes.is_empty() => Some(d.clone()),
                _ => None,
            };
            if let Some(own) = fixed::route(own, &edits, &c.at) {
                policy(w, 8, path, &own);
            }
            let o = origin(base.map(|b| &b.holder), dest.map(|d| &d.holder));
            w.origins.calls.insert(path.to_owned(), o);
            if !routes.is_empty() {
                w.line(8, "routes:");
            }
            for (n, r) in &chosen {
                let rpath = format!("{path}.routes.{n}");
                w.line(10, &format!("{n}:"));
                if let Some(p) = r.path.as_deref().filter(|p| p.starts_with('/')) {
                    w.field(12, &rpath, "path", &quote(p), Some(&r.holder));
                }
                if let Some(m) = &r.method {
                    w.field(12, &rpath, "method", &quote(m), Some(&r.holder));
                }
                let edits = w.edits(&rpath);
                let fixed = fixed::route(Some(r.clone()), &edits, &c.at);
                if let Some(r) = &fixed {
                    policy(w, 12, &rpath, r);
                }
                let sub = subset(host, r);
                if let Some(s) = fixed::destination(sub, &edits, &c.at) {
                    destination(w, 12, &rpath, &s);
                }
                let d = sub.or(dest).map(|d| &d.holder);
                w.origins.calls.insert(rpath, origin(Some(&r.holder), d));
            }
        }
    }
}

/// Istio's mesh-wide default retry policy (`default`) on a route that writes no `retries`; a
/// route that writes them starts from Istio's built-in policy instead, as `retry.go` does.
fn with_default(r: &Route, default: Option<&Route>) -> Route {
    let mut out = r.clone();
    if let Some(d) = default
        && r.retry_count.is_none()
        && r.retry_on.is_none()
    {
        out.retry_count = d.retry_count.clone();
        out.retry_on = d.retry_on.clone();
        out.status_codes = d.status_codes.clone();
        out.per_try_timeout = out.per_try_timeout.or_else(|| d.per_try_timeout.clone());
        out.backoff_base = d.backoff_base.clone();
    }
    out
}

/// `route` over `base`: what the route writes wins; its retry settings, if it writes any,
/// replace all of the base's (Linkerd: a route's retry annotations override its Service's).
fn over(base: &Route, route: &Route) -> Route {
    let mut out = route.clone();
    let route_retries = route.retry_count.is_some() || route.retry_on.is_some();
    if !route_retries {
        out.retry_count = base.retry_count.clone();
        out.retry_on = base.retry_on.clone();
        out.status_codes = base.status_codes.clone();
        out.per_try_timeout = out.per_try_timeout.or_else(|| base.per_try_timeout.clone());
    }
    out.timeout = out.timeout.or_else(|| base.timeout.clone());
    out.budget = out.budget.or_else(|| base.budget.clone());
    out.backoff_base = out.backoff_base.or_else(|| base.backoff_base.clone());
    out
}

fn subset<'h>(host: Option<&'h crate::ir::Host>, r: &Route) -> Option<&'h Destination> {
    host?.subsets.get(r.subset.as_deref()?)
}

/// A hopwise name for a route: its own, made valid, or `route-N`; never one already taken.
fn route_name(given: Option<&str>, i: usize, taken: &[String]) -> String {
    let mut n: String = given
        .unwrap_or("")
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    n = n.trim_matches('-').to_owned();
    while n.contains("--") {
        n = n.replace("--", "-");
    }
    if !n.starts_with(|c: char| c.is_ascii_lowercase()) {
        n = format!("route-{n}").trim_end_matches('-').to_owned();
    }
    if n == "route" {
        n = format!("route-{i}");
    }
    n.truncate(56);
    let mut out = n.clone();
    let mut k = 2;
    while taken.contains(&out) {
        out = format!("{n}-{k}");
        k += 1;
    }
    out
}
