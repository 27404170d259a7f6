//! The seed's chain — frontend → checkout → pricing → inventory, a proxy per service, real
//! apps in the middle ([`super::middle`]) — built from a mesh file in process, with inventory
//! failing as a row says; the client's checkout call; the attempts that reached inventory.
//! Shared by `travel.rs` (what each app carries) and `through_apps.rs` (apps that carry
//! nothing, under hopwise's defaults and the seed's common changes).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hopwise_analyze::Failure;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;

use super::in_process::{self, InProcess, with_endpoints};
use super::middle::{Middle, Passes, middle};
use super::{Fixture, backend, closed_port};

/// How long inventory takes to answer a request it serves.
pub const OK_TIME: Duration = Duration::from_millis(5);

/// The chain running: the proxies and apps, and when each request reached inventory.
pub struct Chain {
    pub fixture: Fixture,
    pub frontend: InProcess,
    pub checkout: InProcess,
    pub pricing: InProcess,
    pub apps: [Middle; 2],
    pub arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Chain {
    /// Builds the chain for `mesh` (a function of inventory's address), its middle apps
    /// carrying `passes`, inventory failing with `failure`.
    pub async fn start(
        mesh: impl FnOnce(SocketAddr) -> String,
        passes: Passes,
        grpc: bool,
        failure: Failure,
    ) -> Chain {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let inv = inventory(failure, arrivals.clone()).await;
        let fixture = Fixture::new(&mesh(inv));
        let pricing_app = middle(passes, grpc).await;
        let mut pc = fixture.config("pricing");
        pc.app = Some(pricing_app.addr);
        let pricing = in_process::serve(pc).await;
        pricing_app.calls(pricing.upstreams["inventory"]);
        let checkout_app = middle(passes, grpc).await;
        let mut cc = with_endpoints(
            fixture.config("checkout"),
            "pricing",
            vec![pricing.inbound.unwrap()],
        );
        cc.app = Some(checkout_app.addr);
        let checkout = in_process::serve(cc).await;
        checkout_app.calls(checkout.upstreams["pricing"]);
        let fc = with_endpoints(
            fixture.config("frontend"),
            "checkout",
            vec![checkout.inbound.unwrap()],
        );
        let frontend = in_process::serve(fc).await;
        Chain {
            fixture,
            frontend,
            checkout,
            pricing,
            apps: [checkout_app, pricing_app],
            arrivals,
        }
    }

    /// Tries pricing's proxy sent toward inventory.
    pub fn attempts(&self) -> u64 {
        tries_at_inventory(&self.pricing.metrics())
    }

    /// Of the requests that reached inventory, those at or after `at`.
    pub fn arrived_since(&self, at: Instant) -> u64 {
        let arrivals = self.arrivals.lock().unwrap();
        arrivals.iter().filter(|t| **t >= at).count() as u64
    }
}

/// Inventory failing as the row says, recording when each request reached it; a request for a
/// path under `/ok/` succeeds after [`OK_TIME`] instead (mixed traffic).
async fn inventory(failure: Failure, arrivals: Arc<Mutex<Vec<Instant>>>) -> SocketAddr {
    if failure == Failure::Down {
        return closed_port();
    }
    let b = backend(Arc::new(move |req: Request<Incoming>| {
        arrivals.lock().unwrap().push(Instant::now());
        let ok = req.uri().path().starts_with("/ok/");
        let grpc = req
            .headers()
            .get("content-type")
            .is_some_and(|v| v == "application/grpc");
        Box::pin(async move {
            if ok {
                tokio::time::sleep(OK_TIME).await;
                let mut r = Response::new(Full::new(Bytes::from_static(b"in stock")));
                if grpc {
                    let h = r.headers_mut();
                    h.insert("content-type", "application/grpc".parse().unwrap());
                    h.insert("grpc-status", "0".parse().unwrap());
                }
                return r;
            }
            match failure {
                Failure::Hang => std::future::pending().await,
                Failure::Unavailable => {
                    let mut r = Response::new(Full::new(Bytes::new()));
                    let h = r.headers_mut();
                    h.insert("content-type", "application/grpc".parse().unwrap());
                    h.insert("grpc-status", "14".parse().unwrap());
                    r
                }
                _ => {
                    let mut r = Response::new(Full::new(Bytes::from_static(b"no stock")));
                    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                    r
                }
            }
        })
    }))
    .await;
    b.addr
}

/// The client's request to frontend's local port for checkout, with a trace (in B3 when the
/// apps pass B3 on) and, when `wait` is given, that deadline, after which it goes away (its
/// connection closes). What it got: the status, or the gRPC status; `None`: nothing.
pub async fn checkout(
    addr: SocketAddr,
    grpc: bool,
    passes: Passes,
    wait: Duration,
) -> Option<String> {
    checkout_at(addr, "/shop.Checkout/Buy", grpc, passes, wait).await
}

/// [`checkout`] for `path` (under `/ok/`: inventory serves it).
pub async fn checkout_at(
    addr: SocketAddr,
    path: &str,
    grpc: bool,
    passes: Passes,
    wait: Duration,
) -> Option<String> {
    let mut req = Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let h = req.headers_mut();
    let ms = wait.as_millis();
    if grpc {
        h.insert("content-type", "application/grpc".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("grpc-timeout", format!("{ms}m").parse().unwrap());
    } else {
        h.insert("x-hopwise-timeout-ms", ms.to_string().parse().unwrap());
    }
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    if passes == Passes::B3 {
        h.insert("b3", format!("{trace}-00f067aa0ba902b7-1").parse().unwrap());
    } else {
        let tp = format!("00-{trace}-00f067aa0ba902b7-01");
        h.insert("traceparent", tp.parse().unwrap());
    }
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Nagle's wait is real time, which the paused clock would skip past to a timeout.
    tcp.set_nodelay(true).unwrap();
    let io = TokioIo::new(tcp);
    let call = async move {
        let r = if grpc {
            let (mut s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .ok()?;
            tokio::spawn(c);
            s.send_request(req).await.ok()?
        } else {
            let (mut s, c) = hyper::client::conn::http1::handshake(io).await.ok()?;
            tokio::spawn(c);
            s.send_request(req).await.ok()?
        };
        let status = r.status();
        let head = r.headers().get("grpc-status").cloned();
        let body = r.into_body().collect().await.ok()?;
        let grpc_status =
            head.or_else(|| body.trailers().and_then(|t| t.get("grpc-status").cloned()));
        Some(match grpc_status {
            Some(s) if grpc => format!("grpc-status {}", s.to_str().unwrap_or("?")),
            _ => status.as_u16().to_string(),
        })
    };
    tokio::time::timeout(wait, call).await.ok().flatten()
}

/// The value of the first series of `family` (its full name, `_total` and all) whose labels
/// contain each of `labels` (`key="value"`), in `metrics` text; 0 when none.
pub fn counter(metrics: &str, family: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{'))
                && labels.iter().all(|want| l.contains(want))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Tries pricing's proxy sent toward inventory, from its `/metrics`.
fn tries_at_inventory(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with("hopwise_tries_total{")
                && l.contains("direction=\"outbound\"")
                && l.contains("service=\"inventory\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
