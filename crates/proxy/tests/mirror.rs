//! `RequestMirror` through real proxies over mutual TLS to real apps: every request the rule
//! takes reaches its backend's app, and a copy, with the same body, reaches the mirror's app;
//! a mirror whose app hangs or whose copies cannot connect never fails or holds up a request;
//! a body larger than the proxy keeps for a copy is never sent in part.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use support::*;

const MESH: &str = r#"
mesh: { name: t, trust_domain: test.local }
services:
  shop:
    calls: { orders: { timeout: 2s }, orders-v1: { timeout: 2s }, orders-v2: { timeout: 2s } }
  orders:
    routes:
      shadow:
        rules:
          - filters:
              - type: RequestMirror
                request_mirror: { backend: { service: orders-v2 } }
            backends: [{ service: orders-v1 }]
  orders-v1: {}
  orders-v2: {}
"#;

/// An app that keeps every body it is sent, whole or not (`None`: the body broke off).
fn keeper(bodies: Arc<Mutex<Vec<Option<String>>>>) -> Handler {
    Arc::new(move |req: Request<Incoming>| {
        let bodies = bodies.clone();
        Box::pin(async move {
            let body = req.into_body().collect().await.ok();
            let text = body.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned());
            let len = text.as_ref().map_or(0, String::len);
            bodies.lock().unwrap().push(text);
            Response::new(Full::new(Bytes::from(format!("kept {len}"))))
        })
    })
}

struct Shop {
    _f: Fixture,
    shop: hopwise_proxy::Running,
    _procs: Vec<hopwise_proxy::Running>,
    v1: Arc<Mutex<Vec<Option<String>>>>,
}

impl Shop {
    /// shop's proxy → orders-v1's proxy → an app that keeps bodies; copies to `mirror`'s
    /// address (orders-v2's proxy in front of `mirror_app`, or anything else).
    async fn new(mirror_app: Option<Handler>) -> Shop {
        let f = Fixture::new(MESH);
        let v1 = Arc::new(Mutex::new(Vec::new()));
        let app1 = backend(keeper(v1.clone())).await;
        let p1 = start(inbound(f.config("orders-v1"), app1.addr)).await;
        let mut procs = vec![p1];
        let mirror: SocketAddr = match mirror_app {
            Some(h) => {
                let app2 = backend(h).await;
                let p2 = start(inbound(f.config("orders-v2"), app2.addr)).await;
                let addr = p2.bound.inbound.unwrap();
                procs.push(p2);
                addr
            }
            None => closed_port(),
        };
        let shop = outbound(
            f.config("shop"),
            &[
                ("orders", closed_port()),
                ("orders-v1", procs[0].bound.inbound.unwrap()),
                ("orders-v2", mirror),
            ],
        );
        Shop {
            shop: start(shop).await,
            _f: f,
            _procs: procs,
            v1,
        }
    }

    /// POSTs `body` to orders through shop's proxy, which must answer within 5 s (a liveness
    /// bound: a copy must never hold the request up).
    async fn post(&self, body: &'static [u8]) -> (StatusCode, String) {
        let port = self.shop.bound.upstreams["orders"];
        let sent = get(port, request("POST", "/orders", "orders", body));
        let (status, _, text) = tokio::time::timeout(Duration::from_secs(5), sent)
            .await
            .expect("the request was held up");
        (status, text)
    }
}

/// Waits (up to 5 s) until `bodies` holds `n`.
async fn until(bodies: &Mutex<Vec<Option<String>>>, n: usize) -> Vec<Option<String>> {
    for _ in 0..500 {
        if bodies.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bodies.lock().unwrap().clone()
}

const BODIES: [&[u8]; 5] = [
    b"order-0",
    b"order-1",
    b"",
    b"order-3 with more",
    b"order-4",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_reaches_its_backend_and_a_copy_with_its_body_the_mirror() {
    let v2 = Arc::new(Mutex::new(Vec::new()));
    let s = Shop::new(Some(keeper(v2.clone()))).await;
    for body in BODIES {
        let (status, text) = s.post(body).await;
        assert_eq!(
            (status, text),
            (StatusCode::OK, format!("kept {}", body.len()))
        );
    }
    let expected: Vec<Option<String>> = BODIES
        .iter()
        .map(|b| Some(String::from_utf8(b.to_vec()).unwrap()))
        .collect();
    assert_eq!(until(&s.v1, 5).await, expected);
    // The copies come on tasks of their own, in any order.
    let mut copies = until(&v2, 5).await;
    copies.sort();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(copies, sorted);
    // Counted once each copy's answer is read (after its app kept the body).
    let counted = r#"hopwise_responses_total{direction="outbound",service="orders-v2",route="orders-v2",class="2xx"} 5"#;
    assert_eq!(until_metric(&s.shop, counted).await, Ok(()));
}

/// Waits (up to 5 s) until the proxy's metrics hold `line`; the text when they do not.
async fn until_metric(proxy: &hopwise_proxy::Running, line: &str) -> Result<(), String> {
    let mut text = String::new();
    for _ in 0..500 {
        text = metrics(proxy).await;
        if text.contains(line) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("no {line} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_or_dead_mirror_never_fails_nor_holds_up_a_request() {
    let hanging = Shop::new(Some(support::hanging())).await;
    let dead = Shop::new(None).await;
    for s in [&hanging, &dead] {
        for body in BODIES {
            assert_eq!(s.post(body).await.0, StatusCode::OK);
        }
        assert_eq!(until(&s.v1, 5).await.len(), 5);
    }
    let refused = r#"hopwise_local_replies_total{direction="outbound",service="orders-v2",reason="connect-refused"} 5"#;
    assert_eq!(until_metric(&dead.shop, refused).await, Ok(()));
}

/// Past the 64 KiB a copy may keep (the route retries nothing, so that is all it keeps), in a
/// chunked body whose end the copy could not tell from a break: the request goes whole to its
/// backend, and the mirror's app never gets a part of it as if it were all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_large_to_keep_is_never_mirrored_in_part() {
    let v2 = Arc::new(Mutex::new(Vec::new()));
    let s = Shop::new(Some(keeper(v2.clone()))).await;
    let mut raw_request = b"POST /orders HTTP/1.1\r\nhost: orders\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..20 {
        raw_request.extend_from_slice(b"2800\r\n");
        raw_request.extend_from_slice(&[b'x'; 0x2800]);
        raw_request.extend_from_slice(b"\r\n");
    }
    raw_request.extend_from_slice(b"0\r\n\r\n");
    let answer = raw(
        s.shop.bound.upstreams["orders"],
        &raw_request,
        Duration::from_secs(5),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("kept 204800"), "{answer}");
    assert_eq!(s.post(b"small").await.0, StatusCode::OK);
    // The small one's copy arrives; the big one's, if any of it got there, broke off.
    until(&v2, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let copies = v2.lock().unwrap().clone();
    assert!(copies.contains(&Some("small".into())), "{copies:?}");
    for c in &copies {
        assert!(
            matches!(c.as_deref(), None | Some("small")),
            "a part sent as a whole: {} bytes",
            c.as_ref().map_or(0, String::len)
        );
    }
}

/// A mirror keeps the body for its copy, but the tries still resend only what their policy
/// allows: past `max_replay_bytes` a failed request is not retried, mirrored or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_does_not_widen_what_the_tries_may_resend() {
    let mesh = MESH.replace(
        "orders-v1: { timeout: 2s }",
        "orders-v1: { timeout: 2s, idempotent: true, retries: { count: 2, on: [5xx], max_replay_bytes: 100 } }",
    );
    let f = Fixture::new(&mesh);
    let failing = backend(status(503)).await;
    let v2 = Arc::new(Mutex::new(Vec::new()));
    let mirror_app = backend(keeper(v2.clone())).await;
    let p1 = start(inbound(f.config("orders-v1"), failing.addr)).await;
    let p2 = start(inbound(f.config("orders-v2"), mirror_app.addr)).await;
    let shop = outbound(
        f.config("shop"),
        &[
            ("orders", closed_port()),
            ("orders-v1", p1.bound.inbound.unwrap()),
            ("orders-v2", p2.bound.inbound.unwrap()),
        ],
    );
    let shop = start(shop).await;
    let port = shop.bound.upstreams["orders"];
    let small: &'static [u8] = b"ten bytes!";
    let large: &'static [u8] = Box::leak(vec![b'y'; 1000].into_boxed_slice());
    let (status, _, _) = get(port, request("POST", "/orders", "orders", small)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        failing.hits.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "retried twice"
    );
    let (status, _, _) = get(port, request("POST", "/orders", "orders", large)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        failing.hits.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "not retried"
    );
    let mut copies = until(&v2, 2).await;
    copies.sort();
    assert_eq!(
        copies,
        [Some("ten bytes!".to_owned()), Some("y".repeat(1000))]
    );
}
