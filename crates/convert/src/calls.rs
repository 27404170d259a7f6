//! Who calls whom, which mesh configuration does not say. Read from the user's calls file, one
//! call per line as the seed's checker takes them (`frontend -> checkout`), a chain
//! (`frontend -> checkout -> pricing`), `key=value` settings after it (`app_retries=2`,
//! `method=POST`, `idempotent=true`, `protocol=grpc`, `route=jason,canary`: the callee's routes
//! the call uses), and `entry SERVICE timeout=2s retries=1`
//! for the client outside; or from a text export of the mesh's request metrics (Istio's
//! `istio_requests_total`, Linkerd's `response_total`), each series with a source and a
//! destination one call, a source Istio calls `unknown` the outside. `#` starts a comment.
//! Every call remembers its line. A service may be written with its namespace,
//! `reviews.bookinfo` (a series' namespace labels say it); [`crate::names`] settles the names.

use hopwise_model::read::valid_name;

/// `reviews`, or `reviews.bookinfo` (a service and its namespace).
fn service_name(s: &str) -> bool {
    match s.split_once('.') {
        Some((name, ns)) => valid_name(name) && valid_name(ns),
        None => valid_name(s),
    }
}

/// `name` in `ns`, when the series says it.
fn in_namespace(name: &str, ns: Option<&str>) -> String {
    match ns {
        Some(ns) if !ns.is_empty() => format!("{name}.{ns}"),
        _ => name.to_owned(),
    }
}
use hopwise_model::{Dur, Pos, Protocol};
use serde::Serialize;

use crate::node::At;
use crate::objects::Source;
use crate::problem::Problem;

/// One call and where it was said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub from: String,
    pub to: String,
    pub at: At,
    pub app_retries: Option<u64>,
    pub method: Option<String>,
    pub idempotent: Option<bool>,
    pub protocol: Option<Protocol>,
    /// The callee's routes this call uses (`route=a,b`); `None`: all of them.
    pub routes: Option<Vec<String>>,
}

impl Call {
    /// `from` calls `to` (written at `at`), with nothing more said of the call.
    fn new(from: &str, to: &str, at: At) -> Call {
        Call {
            from: from.to_owned(),
            to: to.to_owned(),
            at,
            app_retries: None,
            method: None,
            idempotent: None,
            protocol: None,
            routes: None,
        }
    }
}

/// A service where requests enter, and its outside client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub service: String,
    pub at: At,
    pub timeout: Option<Dur>,
    pub retries: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Calls {
    pub calls: Vec<Call>,
    pub entries: Vec<Entry>,
}

/// Reads every calls source; problems at their line and column.
pub fn read(sources: &[Source], problems: &mut Vec<Problem>) -> Calls {
    let mut out = Calls::default();
    for s in sources {
        for (i, raw) in s.text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            if line.trim().is_empty() {
                continue;
            }
            let column = line.len() - line.trim_start().len() + 1;
            let at = At {
                file: s.name.to_owned(),
                pos: Pos {
                    line: i + 1,
                    column,
                },
                object: "calls".to_owned(),
                field: String::new(),
            };
            let mut fail = |column: usize, message: String| {
                problems.push(Problem {
                    file: s.name.to_owned(),
                    pos: Some(Pos {
                        line: i + 1,
                        column,
                    }),
                    object: None,
                    message,
                })
            };
            if let Some((metric, rest)) = metric_line(line) {
                if let Err(m) = series(&mut out, metric, rest, at) {
                    fail(column, m);
                }
                continue;
            }
            if let Err((col, m)) = call_line(&mut out, line, at) {
                fail(col, m);
            }
        }
    }
    out
}

/// The column of `word` in `line` (1-based), for messages.
fn col(line: &str, word: &str) -> usize {
    line.find(word).map_or(1, |i| i + 1)
}

fn call_line(out: &mut Calls, line: &str, at: At) -> Result<(), (usize, String)> {
    let normalised = line.replace('→', "->");
    let mut words = normalised.split_whitespace().peekable();
    if words.peek() == Some(&"entry") {
        words.next();
        let service = words
            .next()
            .ok_or((at.pos.column, "`entry` needs a service name".to_owned()))?;
        if !service_name(service) {
            return Err((
                col(line, service),
                format!("`{service}` is not a service name"),
            ));
        }
        let mut entry = Entry {
            service: service.to_owned(),
            at,
            timeout: None,
            retries: None,
        };
        for w in words {
            let (k, v) = setting(line, w)?;
            match k {
                "timeout" if v == "none" => entry.timeout = None,
                "timeout" => {
                    entry.timeout = Some(
                        v.parse::<Dur>()
                            .map_err(|e| (col(line, w), format!("`{w}`: {e}")))?,
                    )
                }
                "retries" => entry.retries = Some(number(line, w, v)?),
                _ => {
                    return Err((
                        col(line, w),
                        format!("`{k}`: an entry takes `timeout` and `retries`"),
                    ));
                }
            }
        }
        out.entries.push(entry);
        return Ok(());
    }
    let text: Vec<&str> = normalised.split_whitespace().collect();
    let mut names = Vec::new();
    let mut rest = text.as_slice();
    while let [name, tail @ ..] = rest {
        if name.contains('=') {
            break;
        }
        if !service_name(name) {
            return Err((
                col(line, name),
                format!(
                    "`{name}` is not a service name (lowercase letters, digits, `-`, `_`; `name.namespace` for a namespace's)"
                ),
            ));
        }
        names.push(*name);
        match tail {
            ["->", more @ ..] => rest = more,
            _ => {
                rest = tail;
                break;
            }
        }
    }
    if names.len() < 2 {
        return Err((
            at.pos.column,
            "expected `caller -> callee` (or a chain `a -> b -> c`)".to_owned(),
        ));
    }
    let mut call = Call::new("", "", at);
    for w in rest {
        let (k, v) = setting(line, w)?;
        match k {
            "app_retries" => call.app_retries = Some(number(line, w, v)?),
            "method" => call.method = Some(v.to_owned()),
            "route" => call.routes = Some(v.split(',').map(str::to_owned).collect()),
            "idempotent" => {
                call.idempotent = Some(
                    v.parse::<bool>()
                        .map_err(|_| (col(line, w), format!("`{w}`: write `true` or `false`")))?,
                )
            }
            "protocol" => {
                call.protocol = Some(match v {
                    "http" => Protocol::Http,
                    "grpc" => Protocol::Grpc,
                    _ => return Err((col(line, w), format!("`{w}`: write `http` or `grpc`"))),
                })
            }
            _ => {
                return Err((
                    col(line, w),
                    format!(
                        "`{k}`: a call takes `app_retries`, `method`, `idempotent`, `protocol`, `route`"
                    ),
                ));
            }
        }
    }
    for pair in names.windows(2) {
        let mut c = call.clone();
        c.from = pair[0].to_owned();
        c.to = pair[1].to_owned();
        out.calls.push(c);
    }
    Ok(())
}

fn setting<'a>(line: &str, w: &'a str) -> Result<(&'a str, &'a str), (usize, String)> {
    w.split_once('=').ok_or_else(|| {
        (
            col(line, w),
            format!("`{w}`: expected `->` or a `key=value` setting"),
        )
    })
}

fn number(line: &str, w: &str, v: &str) -> Result<u64, (usize, String)> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n <= u64::from(u32::MAX))
        .ok_or_else(|| (col(line, w), format!("`{w}`: expected a whole number")))
}

/// `istio_requests_total{…} 12` or `response_total{…} 3`: the metric and what follows its name.
fn metric_line(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    ["istio_requests_total", "response_total"]
        .into_iter()
        .find_map(|m| {
            line.strip_prefix(m)
                .filter(|r| r.starts_with('{'))
                .map(|r| (m, r))
        })
}

fn labels(rest: &str) -> Option<(Vec<(&str, &str)>, &str)> {
    let body = rest.strip_prefix('{')?;
    let end = body.find('}')?;
    let mut out = Vec::new();
    let mut s = &body[..end];
    while !s.is_empty() {
        let (k, tail) = s.split_once("=\"")?;
        let close = tail.find('"')?;
        out.push((k.trim().trim_start_matches(','), &tail[..close]));
        s = tail[close + 1..].trim_start_matches(',').trim();
    }
    Some((out, body[end + 1..].trim()))
}

fn series(out: &mut Calls, metric: &str, rest: &str, at: At) -> Result<(), String> {
    let (labels, value) = labels(rest).ok_or("a series whose labels cannot be read")?;
    let count = value
        .split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or("a series without a value")?;
    if count <= 0.0 {
        return Ok(());
    }
    let label = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let (from, to, from_ns, to_ns) = if metric == "istio_requests_total" {
        (
            label("source_workload").or(label("source_app")),
            label("destination_service_name").or(label("destination_workload")),
            label("source_workload_namespace"),
            label("destination_service_namespace").or(label("destination_workload_namespace")),
        )
    } else {
        if label("direction") != Some("outbound") {
            return Ok(());
        }
        (
            label("deployment"),
            label("dst_service").or(label("dst_deployment")),
            label("namespace"),
            label("dst_namespace"),
        )
    };
    let (Some(from), Some(to)) = (from, to) else {
        return Err(format!(
            "a {metric} series without its source and destination labels"
        ));
    };
    let short = to.split('.').next().unwrap_or(to);
    if !valid_name(short) {
        return Err(format!("`{to}` is not a service name"));
    }
    let to = crate::names::key(to, to_ns);
    let to = to.as_str();
    let mut at = at;
    at.object = metric.to_owned();
    if from == "unknown" {
        if !out.entries.iter().any(|e| e.service == to) {
            out.entries.push(Entry {
                service: to.to_owned(),
                at,
                timeout: None,
                retries: None,
            });
        }
        return Ok(());
    }
    if !valid_name(from) {
        return Err(format!("`{from}` is not a service name"));
    }
    let from = in_namespace(from, from_ns);
    let from = from.as_str();
    if !out.calls.iter().any(|c| c.from == from && c.to == to) {
        out.calls.push(Call::new(from, to, at));
    }
    Ok(())
}
