//! The dashboard's HTTP API over real sockets: a control plane in this process with its
//! dashboard, a copy registered over gRPC with an admin address served by a stand-in proxy
//! (real `/metrics` text over HTTP), sample knobs behind a `--samples` file, and the
//! calculators with the seed's samples. Waits are generous deadlines, not timing assertions.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hopwise_control::plane::{ConfigFile, Options, Plane};
use hopwise_control::store::Store;
use hopwise_control::{api, client, dashboard, pb};
use serde_json::{Value, json};

const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend:
    entry: { timeout: 3s }
    calls: { checkout: { timeout: 2s } }
  checkout:
    calls: { pricing: { timeout: 1s, per_try_timeout: 300ms } }
  pricing: {}
";

/// One HTTP/1.1 exchange on a fresh connection: status and body.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (status, body) = http(addr, "GET", path, "", "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(
        addr,
        "POST",
        path,
        "content-type: application/json\r\n",
        &body.to_string(),
    );
    (status, serde_json::from_str(&text).unwrap())
}

/// A tiny HTTP server on 127.0.0.1:0 answering every request with `answer(method, path, body)`.
fn serve(answer: impl Fn(&str, &str, &str) -> (u16, String) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as much body as content-length says.
                let (head, mut body) = loop {
                    let Ok(n) = conn.read(&mut chunk) else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some((h, b)) = text.split_once("\r\n\r\n") {
                        break (h.to_owned(), b.to_owned());
                    }
                };
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                while body.len() < len {
                    let Ok(n) = conn.read(&mut chunk) else { return };
                    if n == 0 {
                        break;
                    }
                    body.push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
                let mut words = head.split_whitespace();
                let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let (status, text) = answer(method, path, &body);
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    addr
}

/// A stand-in for a sample app's knobs: GET the state, POST a partial object, POST clear.
fn knobs() -> SocketAddr {
    let state = Arc::new(Mutex::new(
        json!({"error_rate": 0.0, "latency_ms": 0, "down": false, "hang": false, "fail_first": 0, "lose_response": false}),
    ));
    let clean = state.lock().unwrap().clone();
    serve(move |method, path, body| {
        let mut s = state.lock().unwrap();
        match (method, path) {
            ("GET", "/fault") => (200, s.to_string()),
            ("POST", "/fault/clear") => {
                *s = clean.clone();
                (200, s.to_string())
            }
            ("POST", "/fault") => match serde_json::from_str::<Value>(body) {
                Ok(Value::Object(o)) if o.keys().all(|k| s.get(k).is_some()) => {
                    for (k, v) in o {
                        s[k] = v;
                    }
                    (200, s.to_string())
                }
                _ => (400, json!({"error": "unknown knob"}).to_string()),
            },
            _ => (404, "{}".into()),
        }
    })
}

fn until(what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pred() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_api_over_real_http() {
    let dir = tempfile::tempdir().unwrap();
    let started = Plane::start(
        Store::open(&dir.path().join("state")).unwrap(),
        Options {
            config: Some(ConfigFile {
                name: "mesh.yaml".into(),
                text: MESH.into(),
            }),
            ca_files: None,
            cert_lifetime: Duration::from_secs(3600),
        },
        SystemTime::now(),
    )
    .unwrap();
    let frontend = started.plane.token("frontend").unwrap().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = api::spawn(started.plane, listener).unwrap();
    let samples = dir.path().join("samples.json");
    let dash = dashboard::spawn(
        running.handle(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Some(samples.clone()),
    )
    .unwrap();
    let d = dash.addr;

    // A stand-in proxy of frontend: 12 requests to checkout so far, 2 of them failed.
    let served = Arc::new(Mutex::new(12u32));
    let count = served.clone();
    let admin = serve(move |_, path, _| {
        let n = *count.lock().unwrap();
        match path {
            "/metrics" => (
                200,
                format!(
                    "hopwise_requests_total{{direction=\"outbound\",service=\"checkout\",route=\"checkout\"}} {n}\n\
                 hopwise_responses_total{{direction=\"outbound\",service=\"checkout\",route=\"checkout\",class=\"2xx\"}} {}\n\
                 hopwise_responses_total{{direction=\"outbound\",service=\"checkout\",route=\"checkout\",class=\"5xx\"}} 2\n\
                 hopwise_retries_total{{service=\"checkout\",route=\"checkout\",condition=\"connect-failure\"}} 1\n\
                 hopwise_app_calls_total{{service=\"frontend\",trace_context=\"carried\"}} {n}\n\
                 hopwise_app_calls_total{{service=\"frontend\",trace_context=\"absent\"}} 0\n# EOF\n",
                    n - 2
                ),
            ),
            _ => (404, String::new()),
        }
    });
    let server =
        client::Server::from_state(&running.addr.to_string(), &dir.path().join("state")).unwrap();
    let mut c = client::connect(&server).await.unwrap();
    // An admin address that is not one is refused before anything is registered.
    let bad = c
        .register(pb::RegisterRequest {
            token: frontend.clone(),
            inbound_addr: "127.0.0.1:7001".into(),
            ttl_ms: 0,
            admin_addr: "not-an-address".into(),
            labels: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    c.register(pb::RegisterRequest {
        token: frontend.clone(),
        inbound_addr: "127.0.0.1:7001".into(),
        ttl_ms: 0,
        admin_addr: admin.to_string(),
        labels: Default::default(),
    })
    .await
    .unwrap();

    tokio::task::spawn_blocking(move || {
        // --- the page and its assets: served, and nothing from outside ----------------------
        let (status, html) = http(d, "GET", "/", "", "");
        assert_eq!(status, 200);
        assert!(html.contains("<script src=\"/app.js\""));
        for asset in ["/", "/app.js", "/charts.js", "/style.css"] {
            let (_, text) = http(d, "GET", asset, "", "");
            let outside = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside.contains("https://") && !outside.contains("http://"), "{asset} links outside");
        }
        // A request for another host name (DNS rebinding) is refused.
        let mut s = TcpStream::connect(d).unwrap();
        s.write_all(b"GET /api/graph HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");

        // --- the graph: the registered copy's metrics, read over HTTP -----------------------
        until("the edge frontend → checkout shows 12 requests", || {
            let g = get_json(d, "/api/graph");
            g["edges"].as_array().unwrap().iter().any(|e| {
                e["from"] == "frontend" && e["to"] == "checkout" && e["requests"] == 12
            })
        });
        *served.lock().unwrap() = 40;
        until("the edge follows the counter to 40, with a rate", || {
            let g = get_json(d, "/api/graph");
            let e = g["edges"].as_array().unwrap().iter().find(|e| e["to"] == "checkout").cloned().unwrap();
            e["requests"] == 40 && e["rps"].as_f64().unwrap() > 0.0
        });
        let g = get_json(d, "/api/graph");
        assert_eq!(g["mesh"], "shop");
        let e = &g["edges"][0];
        assert_eq!(e["retries"]["connect-failure"], 1);
        assert_eq!(e["failures"], 2);
        let fe = g["services"].as_array().unwrap().iter().find(|s| s["name"] == "frontend").unwrap();
        assert_eq!(fe["proxies"][0]["admin"], admin.to_string());
        assert_eq!(fe["proxies"][0]["metrics"], "ok");
        // Its app carried trace context on all 40 of its calls, which the file does not declare.
        assert_eq!(fe["stats"]["app"]["carried"], 40.0);
        let verdict = fe["carries"]["disagrees"].as_str().unwrap();
        assert!(verdict.contains("40 of 40") && verdict.contains("carries: [trace-context]"), "{verdict}");
        assert!(fe["carries"]["declared"].as_array().unwrap().is_empty());
        // --- the timeline: a point per round; from 12 to 40, its points add up to 28 --------
        let tl = get_json(d, "/api/timeline");
        assert_eq!(tl["window_ms"], 15 * 60 * 1000);
        let points = |tl: &Value| -> Vec<Value> {
            tl["edges"].as_array().unwrap().iter()
                .find(|e| e["from"] == "frontend" && e["to"] == "checkout")
                .map(|e| e["points"].as_array().unwrap().clone())
                .unwrap_or_default()
        };
        let all = points(&tl);
        let grew: u64 = all.iter().map(|p| p["requests"].as_u64().unwrap()).sum();
        assert_eq!(grew, 28, "{all:?}");
        let last = all.last().unwrap();
        // No new failure since the first reading: every point that saw responses saw only ok.
        assert!(all.iter().all(|p| p["failed"] == 0), "{all:?}");
        assert!(all.iter().any(|p| p["success"] == 1.0 && p["rps"].as_f64().unwrap() > 0.0), "{all:?}");
        // `since`: only what came after it.
        let t = last["t"].as_u64().unwrap();
        assert!(points(&get_json(d, &format!("/api/timeline?since={t}"))).iter().all(|p| p["t"].as_u64().unwrap() > t));
        // The mesh's other call is an edge too, without traffic.
        assert!(g["edges"].as_array().unwrap().iter().any(|e| e["from"] == "checkout" && e["to"] == "pricing" && e["requests"] == 0));

        // --- policy and findings of the mesh in force ---------------------------------------
        let p = get_json(d, "/api/policy");
        let checkout = p.as_array().unwrap().iter().find(|s| s["name"] == "checkout").unwrap();
        assert_eq!(checkout["calls"][0]["to"], "pricing");
        assert_eq!(checkout["calls"][0]["policy"]["per_try_timeout"], "300ms");
        assert_eq!(checkout["calls"][0]["method"], "GET");
        assert_eq!(checkout["calls"][0]["idempotent"], true);
        let f = get_json(d, "/api/findings");
        assert_eq!(f["mesh"], "shop");
        assert_eq!(f["errors"], 0);

        // --- the calculators, with the seed's samples ----------------------------------------
        let s = get_json(d, "/api/calc/samples");
        let (status, fan) = post_json(d, "/api/calc/fanout", &s["fanout"]);
        assert_eq!((status, fan["attempts"].as_u64()), (200, Some(27)));
        let (status, t) = post_json(d, "/api/calc/timeouts", &s["timeouts"]);
        assert_eq!((status, t["worst_case_ms"].as_u64()), (200, Some(9200)));
        let mut budget = s["fanout"].clone();
        budget["budget"] = json!(0.2);
        let (_, b) = post_json(d, "/api/calc/fanout", &budget);
        assert!((b["with_budget"].as_f64().unwrap() - 1.728).abs() < 1e-9);
        // Bad input: a reason, not a crash.
        let (status, e) = post_json(d, "/api/calc/fanout", &json!({"depth": 3, "failure": "melted"}));
        assert_eq!(status, 400);
        assert!(e["error"].as_str().unwrap().contains("melted"));
        let (status, _) = post_json(d, "/api/calc/timeouts", &json!({"services": []}));
        assert_eq!(status, 400);
        // Without the JSON content type (a cross-site form cannot set it): refused.
        let (status, _) = http(d, "POST", "/api/calc/fanout", "content-type: text/plain\r\n", "{}");
        assert_eq!(status, 415);

        // --- fault knobs: none until the samples file exists, then relayed ------------------
        assert_eq!(get_json(d, "/api/fault")["copies"], json!([]));
        let k = knobs();
        std::fs::write(
            &samples,
            json!({"mesh": "/m.yaml", "services": {
                "pricing": {"sample": "inventory", "copies": [{"copy": 0, "app": "127.0.0.1:1", "knobs": k.to_string(), "admin": "127.0.0.1:2", "inbound": "127.0.0.1:3"}]},
                "frontend": {"sample": null, "copies": [{"copy": 0, "app": "127.0.0.1:4"}]}}})
            .to_string(),
        )
        .unwrap();
        let all = get_json(d, "/api/fault");
        assert_eq!(all["copies"].as_array().unwrap().len(), 1);
        assert_eq!(all["copies"][0]["state"]["hang"], false);
        let (status, r) = post_json(d, "/api/fault/pricing/0", &json!({"hang": true}));
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["copies"][0]["state"]["hang"], true);
        assert_eq!(get_json(d, "/api/fault/pricing")["copies"][0]["state"]["hang"], true);
        let (status, _) = post_json(d, "/api/fault/pricing", &json!({"melt": 1}));
        assert_eq!(status, 400, "the knobs' 400 is passed on");
        let (status, _) = post_json(d, "/api/fault/pricing", &json!([1]));
        assert_eq!(status, 400);
        let (status, r) = post_json(d, "/api/fault/pricing/clear", &json!({}));
        assert_eq!((status, &r["copies"][0]["state"]["hang"]), (200, &json!(false)));
        let (status, _) = post_json(d, "/api/fault/frontend", &json!({"hang": true}));
        assert_eq!(status, 404, "no knobs there");
        let (status, _) = http(d, "GET", "/api/fault/pricing/x", "", "");
        assert_eq!(status, 404);
    })
    .await
    .unwrap();
    dash.stop();
    running.shutdown().await.unwrap();
}
