//! The OpenTelemetry semantic conventions (stable HTTP and RPC spans) as hopwise's spans follow
//! them: a span's name (`{method} {http.route}`, or `{rpc.service}/{rpc.method}` for gRPC), the
//! request's attributes (`http.request.method`, `url.*`, `server.address` and `server.port`
//! apart, `rpc.*`), the answer's (`http.response.status_code`, `rpc.grpc.status_code`,
//! `error.type`) and which answers are errors, which differs by side: a 4xx is the caller's
//! error, not the server's; of gRPC's codes only those the RPC conventions name fail a server
//! span. hopwise's own attributes (`hopwise.*`) are `record.rs`'s. Pure: plain data in,
//! attributes out.

use std::net::SocketAddr;

use super::{Kind, Value};

/// A span's attributes, in the order they are written.
pub type Attributes = Vec<(&'static str, Value)>;

/// What the conventions read of a request, fixed when it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub method: String,
    /// `http` or `https`: as the request reached this proxy.
    pub scheme: &'static str,
    /// The authority it named (`:authority` or `Host`), if any.
    pub authority: Option<String>,
    /// The path, without the query (never recorded: it may carry secrets).
    pub path: String,
    pub grpc: bool,
}

impl Asked {
    /// `rpc.service` and `rpc.method`, from a gRPC path `/pkg.Service/Method`.
    pub fn rpc(&self) -> Option<(&str, &str)> {
        let (service, method) = self.path.strip_prefix('/')?.split_once('/')?;
        let ok = |s: &str| !s.is_empty() && !s.contains('/');
        (self.grpc && ok(service) && ok(method)).then_some((service, method))
    }

    /// The span's name: `{rpc.service}/{rpc.method}` for gRPC, else `{method} {route}`, or the
    /// method alone when no route template is known (never the raw path: unbounded names).
    pub fn span_name(&self, route: Option<&str>) -> String {
        if let Some((service, method)) = self.rpc() {
            return format!("{service}/{method}");
        }
        match route {
            Some(r) => format!("{} {r}", self.method),
            None => self.method.clone(),
        }
    }

    /// `server.address` and `server.port`: the authority split, the port the scheme's when
    /// unsaid; an IPv6 literal without its brackets.
    pub fn server(&self) -> Option<(String, u16)> {
        let a = self.authority.as_deref()?;
        let default = if self.scheme == "https" { 443 } else { 80 };
        let (host, port) = match a.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h, p.parse().ok()?),
            _ => (a, default),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        (!host.is_empty()).then(|| (host.to_owned(), port))
    }

    /// `url.full`, for a client span: scheme, authority and path, no query.
    pub fn url_full(&self) -> Option<String> {
        let a = self.authority.as_deref()?;
        Some(format!("{}://{a}{}", self.scheme, self.path))
    }

    /// The request's attributes for a span of `kind`.
    pub fn attributes(&self, kind: Kind, route: Option<&str>) -> Attributes {
        let mut out = vec![
            ("http.request.method", Value::Str(self.method.clone())),
            ("url.path", Value::Str(self.path.clone())),
            ("url.scheme", Value::Str(self.scheme.to_owned())),
        ];
        if let Some((host, port)) = self.server() {
            out.push(("server.address", Value::Str(host)));
            out.push(("server.port", Value::Int(i64::from(port))));
        }
        match kind {
            Kind::Server => {
                if let Some(r) = route {
                    out.push(("http.route", Value::Str(r.to_owned())));
                }
            }
            Kind::Client => {
                if let Some(u) = self.url_full() {
                    out.push(("url.full", Value::Str(u)));
                }
            }
        }
        if let Some((service, method)) = self.rpc() {
            out.push(("rpc.system", Value::Str("grpc".to_owned())));
            out.push(("rpc.service", Value::Str(service.to_owned())));
            out.push(("rpc.method", Value::Str(method.to_owned())));
        }
        out
    }
}

/// The answer's attributes for a span of `kind`, pushed onto `out`; `true` when the span is
/// an error. `error.type`: the proxy's own reason when it answered itself (`local`), else the
/// status code that made it an error.
pub fn answer(
    out: &mut Attributes,
    kind: Kind,
    status: u16,
    grpc: Option<u32>,
    local: Option<&'static str>,
) -> bool {
    out.push(("http.response.status_code", Value::Int(i64::from(status))));
    if let Some(g) = grpc {
        out.push(("rpc.grpc.status_code", Value::Int(i64::from(g))));
    }
    let http_error = match kind {
        Kind::Server => status >= 500,
        Kind::Client => status >= 400,
    };
    let grpc_error = grpc.is_some_and(|g| grpc_fails(kind, g));
    let error = http_error || grpc_error;
    if error {
        let why = match (local, grpc.filter(|_| grpc_error)) {
            (Some(l), _) => l.to_owned(),
            (None, Some(g)) => g.to_string(),
            (None, None) => status.to_string(),
        };
        out.push(("error.type", Value::Str(why)));
    }
    error
}

/// Whether gRPC status `code` fails a span of `kind`: every non-OK code for a client; for a
/// server only UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE and DATA_LOSS
/// (the others are the caller's doing).
pub fn grpc_fails(kind: Kind, code: u32) -> bool {
    match kind {
        Kind::Client => code != 0,
        Kind::Server => matches!(code, 2 | 4 | 12 | 13 | 14 | 15),
    }
}

/// `client.address`/`client.port` and `network.peer.*` for a server span: the connection's
/// other end (no proxy stands between callers' proxies and this one).
pub fn client(out: &mut Attributes, peer: SocketAddr) {
    let (ip, port) = (peer.ip().to_string(), i64::from(peer.port()));
    out.push(("client.address", Value::Str(ip.clone())));
    out.push(("client.port", Value::Int(port)));
    out.push(("network.peer.address", Value::Str(ip)));
    out.push(("network.peer.port", Value::Int(port)));
}

/// `network.peer.*` for a try: the copy it went to.
pub fn peer(out: &mut Attributes, copy: SocketAddr) {
    out.push(("network.peer.address", Value::Str(copy.ip().to_string())));
    out.push(("network.peer.port", Value::Int(i64::from(copy.port()))));
}

#[cfg(test)]
#[path = "semconv_tests.rs"]
mod tests;
