//! A gateway's front door (`services.<name>.gateway`, docs/routes.md "Gateway"): what a
//! stranger's request must pass before the outbound path routes it into the mesh with the
//! gateway's own identity. The listeners themselves are bounded as every listener is
//! ([`crate::listeners`]: a cap on open connections; [`crate::conn`]: the header-read and idle
//! timeouts; [`crate::worker`]: the head size); TLS is [`tls`]'s (1.2 and 1.3 by rustls, a
//! certificate per server name, an unknown name refused).
//!
//! Here, per request, in order: protocol switches and `CONNECT` refused (a tunnel from outside
//! into the mesh is not a front door's to open); every header the mesh trusts or the
//! connection owns removed (`x-hopwise-*` — identity, deadline, marks —, `x-forwarded-client-cert`;
//! hop-by-hop ones go on the outbound path); `X-Forwarded-For` and `-Proto` set to what the
//! gateway saw (a client's own, and `Forwarded`, dropped) — from a trusted proxy
//! (`trusted_proxies`), the client its `X-Forwarded-For` names, which the per-client limit
//! counts too; a body declared larger than `max_body_bytes`
//! refused (413); the rate limits (every client together, each client address; 429 with
//! `Retry-After`). Then [`crate::outbound`] takes it as [`crate::outbound::Dispatch::Gateway`],
//! its body bounded as it streams ([`crate::replay::BodyCap`]: `max_body_bytes` however it is
//! framed, 413; `body_timeout` between frames, 408). A refusal here is recorded as any answer
//! of the outbound path is ([`crate::outbound::Outbound::refuse`]: access log, span, tap).

use std::net::IpAddr;
use std::sync::Arc;

use hopwise_model::capture::Cidr;
use hopwise_model::gateway::client_behind;
use hopwise_model::rate::RateLimits;
use http::{HeaderMap, HeaderValue, Request};
use tokio_rustls::TlsAcceptor;

use crate::config::ProxyConfig;
use crate::error::ProxyError;
use crate::inbound::limits::CallerKey;
use crate::inbound::rate::{self, RateLimiter};
use crate::metrics::Metrics;
use crate::replay::BodyCap;
use crate::tls::TlsError;
use crate::upgrade::Switch;

pub mod tls;

/// The names of the gateway's limits, in `x-hopwise-limit` and the `limits_tripped` metric.
pub const TOTAL: &str = "gateway.rate_limit.total";
pub const PER_CLIENT: &str = "gateway.rate_limit.per_client";

/// A request header no client may set: the mesh's own (`x-hopwise-*`) and Envoy's forwarded
/// client certificate, which an app behind another mesh's gateway might read as an identity.
fn forged(name: &str) -> bool {
    name.starts_with("x-hopwise-") || name == "x-forwarded-client-cert"
}

/// Removes every header a client could forge to pass for the mesh. Pure.
pub fn strip_forged(headers: &mut HeaderMap) {
    // The usual request carries none: one pass over the names, no allocation.
    if !headers.keys().any(|n| forged(n.as_str())) {
        return;
    }
    let names: Vec<http::HeaderName> = (headers.keys())
        .filter(|n| forged(n.as_str()))
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
}

/// Who is on one connection to the front door, worked out once per connection: its key in the
/// per-client limit, and what the app is told of it (`X-Forwarded-For`, `X-Forwarded-Proto`).
#[derive(Debug, Clone)]
pub struct Client {
    peer: Option<IpAddr>,
    tls: bool,
    key: Option<CallerKey>,
    addr: Option<HeaderValue>,
    proto: HeaderValue,
}

impl Client {
    /// A client at `from`, over TLS or not.
    pub fn new(from: Option<IpAddr>, tls: bool) -> Client {
        // An IPv4 client on a dual-stack listener, as written (not `::ffff:…`).
        let from = from.map(|ip| ip.to_canonical());
        let text = from.map(|ip| ip.to_string());
        Client {
            peer: from,
            tls,
            key: text.as_deref().map(CallerKey::of),
            addr: text.and_then(|t| HeaderValue::from_str(&t).ok()),
            proto: HeaderValue::from_static(if tls { "https" } else { "http" }),
        }
    }

    /// The client behind this connection's peer when the peer is a trusted proxy (its
    /// `X-Forwarded-For`, [`client_behind`]); `None`: the peer itself.
    fn behind(&self, headers: &HeaderMap, trusted: &[Cidr]) -> Option<Client> {
        let peer = self.peer?;
        if trusted.is_empty() {
            return None;
        }
        let entries = (headers.get_all(X_FORWARDED_FOR).iter())
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        let ip = client_behind(peer, entries, trusted);
        (ip != peer).then(|| Client::new(Some(ip), self.tls))
    }
}

/// What the gateway tells the app of the client, in place of whatever the client said: the
/// gateway is the edge, so the address it saw is the only one it can vouch for. Pure.
pub fn forwarded(headers: &mut HeaderMap, client: &Client) {
    headers.remove(http::header::FORWARDED);
    match &client.addr {
        Some(a) => headers.insert(X_FORWARDED_FOR, a.clone()),
        None => headers.remove(X_FORWARDED_FOR),
    };
    headers.insert(X_FORWARDED_PROTO, client.proto.clone());
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: http::HeaderName = http::HeaderName::from_static("x-forwarded-proto");

/// One gateway proxy's front door, shared by its workers.
pub struct Front {
    service: String,
    rates: Option<Arc<RateLimiter>>,
    max_body: u64,
    /// The proxies in front of it (`trusted_proxies`).
    trusted: Vec<Cidr>,
    /// What the outbound path bounds an admitted request's body by as it streams.
    body: BodyCap,
    /// The TLS listener's acceptor (its certificates by server name), if it has one.
    pub acceptor: Option<TlsAcceptor>,
    /// Its certificates, which worker 0 reloads when their files change.
    pub certs: Option<Arc<tls::GatewayCerts>>,
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front")
            .field("service", &self.service)
            .field("max_body", &self.max_body)
            .field("tls", &self.acceptor.is_some())
            .finish()
    }
}

impl Front {
    /// The front door of `config`'s gateway; none when the service is not one.
    pub fn new(config: &ProxyConfig) -> Result<Option<Arc<Front>>, TlsError> {
        let Some(g) = &config.gateway else {
            return Ok(None);
        };
        let limits = RateLimits {
            total: g.gateway.total,
            per_caller: g.gateway.per_client,
            ..RateLimits::default()
        };
        let certs = match &g.gateway.https {
            Some(https) => Some(tls::GatewayCerts::open(https, &g.base)?),
            None => None,
        };
        let acceptor = match &certs {
            Some(certs) => Some(TlsAcceptor::from(tls::server_config(certs)?)),
            None => None,
        };
        Ok(Some(Arc::new(Front {
            service: config.service.clone(),
            rates: RateLimiter::of(limits, std::iter::empty()),
            max_body: g.gateway.max_body_bytes,
            trusted: g.gateway.trusted_proxies.clone(),
            body: BodyCap {
                max: g.gateway.max_body_bytes,
                idle: g.gateway.body_timeout.0,
            },
            acceptor,
            certs,
        })))
    }

    /// Whether a stranger's request may enter, made fit to if so: refused (and counted) with
    /// the reply's error, or let through with its forged headers gone.
    pub fn admit<B>(
        &self,
        req: &mut Request<B>,
        client: &Client,
        metrics: &Metrics,
    ) -> Result<(), ProxyError> {
        let refused = |err: ProxyError| {
            metrics.local_reply(
                crate::metrics::Direction::Outbound,
                &self.service,
                err.reason(),
            );
            err
        };
        if Switch::of(req).is_some() {
            return Err(refused(ProxyError::UpgradeUnsupported(
                "a gateway carries no protocol switch or CONNECT into the mesh",
            )));
        }
        strip_forged(req.headers_mut());
        // Behind a trusted proxy, the client it names; before the header is replaced.
        let behind = client.behind(req.headers(), &self.trusted);
        let client = behind.as_ref().unwrap_or(client);
        forwarded(req.headers_mut(), client);
        let declared = (req.headers().get(http::header::CONTENT_LENGTH))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body) {
            return Err(refused(ProxyError::BodyTooLarge(self.max_body)));
        }
        if let Some(rates) = &self.rates
            && let Err(l) = rates.admit(client.key, None)
        {
            let limit = if l.limit == rate::PER_CALLER {
                PER_CLIENT
            } else {
                TOTAL
            };
            metrics.limit_tripped(&self.service, limit);
            return Err(refused(ProxyError::RateLimited {
                limit,
                retry_after_secs: l.retry_after_secs,
            }));
        }
        // A chunked body declares no length, and any body may stall: bounded as it streams.
        req.extensions_mut().insert(self.body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_is_told_the_address_the_gateway_saw_not_the_clients_claim() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        h.insert("forwarded", HeaderValue::from_static("for=10.0.0.1"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        forwarded(&mut h, &Client::new(Some([192, 0, 2, 7].into()), false));
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert!(!h.contains_key("forwarded"));
        forwarded(&mut h, &Client::new(None, true));
        assert!(!h.contains_key("x-forwarded-for"));
        assert_eq!(h["x-forwarded-proto"], "https");
    }

    #[test]
    fn only_the_meshs_own_headers_and_forwarded_certificates_go() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            (
                "x-hopwise-peer-identity",
                "spiffe://shop.local/service/admin",
            ),
            ("X-Hopwise-Deadline", "1"),
            ("x-forwarded-client-cert", "By=spiffe://x"),
            ("x-hopwise", "kept: not ours"),
            ("authorization", "Bearer t"),
            ("x-request-id", "r1"),
        ] {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                http::HeaderValue::from_static(v),
            );
        }
        strip_forged(&mut h);
        let mut left: Vec<&str> = h.keys().map(http::HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "x-hopwise", "x-request-id"]);
    }
}
