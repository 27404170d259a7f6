//! The mesh `tests/routes.rs` runs: a caller, two parents with routes, their backends as
//! services of their own with real apps that say who they are and what they got.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::support::*;

/// `b` and `c` have routes; `b-v1` and `b-v2` are their backends, each its own service with
/// its own app. `b-v3` is a service `a` does not call.
const MESH: &str = r#"
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls: { b: { timeout: 2s }, c: { timeout: 2s }, b-v1: { timeout: 2s }, b-v2: { timeout: 2s } }
  b:
    routes:
      canary:
        rules:
          - name: beta
            matches: [{ headers: [{ name: x-beta, value: "1" }] }]
            backends: [{ service: b-v2 }]
          - name: split
            matches: [{ path: { value: /split } }]
            backends: [{ service: b-v1, weight: 80 }, { service: b-v2, weight: 20 }]
          - name: nowhere
            matches: [{ path: { value: /zero } }]
            backends: [{ service: b-v1, weight: 0 }, { service: b-v2, weight: 0 }]
          - matches: [{ path: { value: /old } }]
            filters:
              - type: RequestRedirect
                request_redirect: { path: { type: ReplacePrefixMatch, replace_prefix_match: /new }, status_code: 301 }
          - matches: [{ path: { value: /set } }]
            filters:
              - type: RequestHeaderModifier
                request_header_modifier:
                  set: [{ name: X-Header-Set, value: set-overwrites-values }]
                  add: [{ name: X-Header-Add, value: header-val-1 }]
                  remove: [X-Header-Remove]
              - type: ResponseHeaderModifier
                response_header_modifier: { set: [{ name: x-answered-by-route, value: "yes" }] }
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /prefix/one } }]
            filters:
              - type: URLRewrite
                url_rewrite: { path: { type: ReplacePrefixMatch, replace_prefix_match: /one } }
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /full/one } }]
            filters:
              - type: URLRewrite
                url_rewrite: { hostname: elsewhere.example, path: { type: ReplaceFullPath, replace_full_path: /one } }
            backends: [{ service: b-v1 }]
          - matches: [{ path: { value: /unknown } }]
            backends: [{ service: b-v3 }]
          - backends: [{ service: b-v1 }]
  c:
    routes:
      mesh-split:
        rules:
          - matches: [{ path: { type: Exact, value: /v1 } }]
            backends: [{ service: b-v1 }]
          - matches: [{ path: { type: Exact, value: /v2 } }]
            backends: [{ service: b-v2 }]
  b-v1: {}
  b-v2: {}
  b-v3: {}
"#;

/// An app that names itself and echoes the path, query and `x-header-*` headers it got
/// (every value of each, joined by `,`, names in order), then its `Host`.
fn named(name: &'static str) -> Handler {
    Arc::new(move |req: Request<Incoming>| {
        Box::pin(async move {
            let mut headers: Vec<String> = req
                .headers()
                .keys()
                .filter(|n| n.as_str().starts_with("x-header-"))
                .map(|n| {
                    let values: Vec<&str> = req
                        .headers()
                        .get_all(n)
                        .iter()
                        .map(|v| v.to_str().unwrap())
                        .collect();
                    format!("{n}={}", values.join(","))
                })
                .collect();
            headers.sort();
            let uri = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let host = req
                .headers()
                .get(http::header::HOST)
                .map(|h| h.to_str().unwrap());
            let host = host.unwrap_or("-");
            let text = format!(
                "app={name} uri={uri} headers={} host={host}",
                headers.join(";")
            );
            Response::new(Full::new(Bytes::from(text)))
        })
    })
}

pub struct Mesh {
    _f: Fixture,
    pub a: hopwise_proxy::Running,
    _v1: hopwise_proxy::Running,
    _v2: hopwise_proxy::Running,
    v1: Backend,
    v2: Backend,
}

/// a's proxy → b-v1's or b-v2's proxy → its app. `b` and `c` run no copy: a request routed
/// to them would fail to connect, so reaching an app proves the route sent it there.
pub async fn mesh() -> Mesh {
    let f = Fixture::new(MESH);
    let v1 = backend(named("v1")).await;
    let v2 = backend(named("v2")).await;
    let p1 = start(inbound(f.config("b-v1"), v1.addr)).await;
    let p2 = start(inbound(f.config("b-v2"), v2.addr)).await;
    let nowhere = closed_port();
    let a = outbound(
        f.config("a"),
        &[
            ("b", nowhere),
            ("c", nowhere),
            ("b-v1", p1.bound.inbound.unwrap()),
            ("b-v2", p2.bound.inbound.unwrap()),
        ],
    );
    let a = start(a).await;
    Mesh {
        _f: f,
        a,
        _v1: p1,
        _v2: p2,
        v1,
        v2,
    }
}

impl Mesh {
    pub fn port(&self, upstream: &str) -> SocketAddr {
        self.a.bound.upstreams[upstream]
    }

    pub fn hits(&self) -> (usize, usize) {
        (
            self.v1.hits.load(Ordering::SeqCst),
            self.v2.hits.load(Ordering::SeqCst),
        )
    }
}

pub fn with_headers(path: &str, host: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = request("GET", path, host, b"");
    for (n, v) in headers {
        req.headers_mut().append(
            http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    req
}

/// A request on one kept-alive connection to `addr`, `n` times; the statuses seen.
pub async fn many(addr: SocketAddr, path: &str, host: &str, n: usize) -> Vec<StatusCode> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        send.ready().await.unwrap();
        let resp = send
            .send_request(request("GET", path, host, b""))
            .await
            .unwrap();
        statuses.push(resp.status());
        resp.into_body().collect().await.unwrap();
    }
    statuses
}
