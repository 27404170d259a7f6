//! What a web page in the user's browser can do to `hopwise up`'s fault knobs, over real
//! sockets: a sample copy's knob server (`up/knobs.rs`) and the dashboard that relays to it
//! (`hopwise control --dashboard`), both behind `hopwise_model::browser_guard`. A cross-site
//! POST (a form: `text/plain`, or a foreign `Origin`) and a DNS-rebinding `Host` are refused
//! and leave the knobs as they were; a same-origin JSON POST changes them.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hopwise_control::plane::{ConfigFile, Options, Plane};
use hopwise_control::store::Store;
use hopwise_control::{api, dashboard};
use hopwise_lab::samples::knobs::{self, Fault, Knobs};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 exchange on a fresh connection, `head` being the header lines after the
/// request line (each ending in `\r\n`): status and body.
async fn http(addr: SocketAddr, method: &str, path: &str, head: &str, body: &str) -> (u16, Value) {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\n{head}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    };
    let out = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn host(addr: SocketAddr) -> String {
    format!("host: {addr}\r\n")
}

const JSON: &str = "content-type: application/json\r\n";

/// The refusals every server here must give, with the knobs left as `before`.
async fn hostile_requests_change_nothing(
    addr: SocketAddr,
    set: &str,
    clear: &str,
    knobs: &Knobs,
    before: &Fault,
) {
    let own = host(addr);
    let port = addr.port();
    let hang = r#"{"hang": true}"#;
    let cases = [
        // A page on another site posting JSON with fetch: its Origin gives it away.
        (
            set,
            format!("{own}origin: http://evil.example\r\n{JSON}"),
            hang,
            403,
        ),
        // The same page re-binding its own name to 127.0.0.1.
        (
            set,
            format!("host: evil.example:{port}\r\norigin: http://evil.example:{port}\r\n{JSON}"),
            hang,
            403,
        ),
        (
            set,
            format!("host: evil.example:{port}\r\n{JSON}"),
            hang,
            403,
        ),
        // A cross-site form: it can only send text/plain, urlencoded or multipart, no Origin
        // in old browsers.
        (set, format!("{own}content-type: text/plain\r\n"), hang, 415),
        (
            set,
            format!("{own}content-type: application/x-www-form-urlencoded\r\n"),
            "hang=true",
            415,
        ),
        (clear, own.clone(), "", 415),
        (clear, format!("{own}origin: null\r\n{JSON}"), "{}", 403),
        // Another loopback port is another origin (another local web server).
        (
            set,
            format!("{own}origin: http://127.0.0.1:{}\r\n{JSON}", port ^ 1),
            hang,
            403,
        ),
    ];
    for (path, head, body, want) in cases {
        let (status, answer) = http(addr, "POST", path, &head, body).await;
        assert_eq!(status, want, "POST {path}\n{head}{body}\n→ {answer}");
        assert!(answer["error"].is_string(), "a short reason: {answer}");
        assert_eq!(
            &knobs.get(),
            before,
            "POST {path}\n{head} changed the knobs"
        );
    }
    // Reads too answer only to this server's own names.
    let (status, _) = http(
        addr,
        "GET",
        set,
        &format!("host: evil.example:{port}\r\n"),
        "",
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knob_server_takes_changes_from_its_own_origin_only() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let k = Knobs::new();
    let _server = knobs::serve(listener, k.clone());
    let fault = Fault {
        fail_first: 3,
        ..Fault::default()
    };
    k.set(fault.clone());
    hostile_requests_change_nothing(addr, "/fault", "/fault/clear", &k, &fault).await;

    // `hopwise fault` (no Origin) and the dashboard's own page (its Origin) get through.
    let (status, state) = http(
        addr,
        "POST",
        "/fault",
        &format!("{}{JSON}", host(addr)),
        r#"{"hang": true}"#,
    )
    .await;
    assert_eq!((status, &state["hang"]), (200, &json!(true)), "{state}");
    for name in ["localhost", "127.0.0.1"] {
        let head = format!(
            "host: {name}:{0}\r\norigin: http://{name}:{0}\r\n{JSON}",
            addr.port()
        );
        let (status, state) = http(addr, "POST", "/fault", &head, r#"{"latency_ms": 5}"#).await;
        assert_eq!((status, &state["latency_ms"]), (200, &json!(5)), "{state}");
    }
    let (status, _) = http(
        addr,
        "POST",
        "/fault/clear",
        &format!("{}{JSON}", host(addr)),
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(k.get(), Fault::default());
    let (status, state) = http(addr, "GET", "/fault", &host(addr), "").await;
    assert_eq!((status, &state["hang"]), (200, &json!(false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_relays_changes_from_its_own_origin_only() {
    let dir = tempfile::tempdir().unwrap();
    let started = Plane::start(
        Store::open(&dir.path().join("state")).unwrap(),
        Options {
            config: Some(ConfigFile {
                name: "mesh.yaml".into(),
                text: "services:\n  a: { calls: { b: {} } }\n  b: {}\n".into(),
            }),
            ca_files: None,
            cert_lifetime: Duration::from_secs(3600),
        },
        SystemTime::now(),
    )
    .unwrap();
    let running = api::spawn(
        started.plane,
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .unwrap();

    // b's one copy: a real knob server, named in the samples file as `hopwise up` writes it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let knob_addr = listener.local_addr().unwrap();
    let k: Arc<Knobs> = Knobs::new();
    let _server = knobs::serve(listener, k.clone());
    let samples = dir.path().join("samples.json");
    let copy = json!({"copy": 0, "app": "127.0.0.1:1", "knobs": knob_addr.to_string()});
    let file = json!({"mesh": "/m.yaml", "services": {"b": {"sample": "leaf", "copies": [copy]}}});
    std::fs::write(&samples, file.to_string()).unwrap();
    let dash = dashboard::spawn(
        running.handle(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Some(samples),
    )
    .unwrap();
    let d = dash.addr;
    let fault = Fault {
        latency_ms: 7,
        ..Fault::default()
    };
    k.set(fault.clone());
    hostile_requests_change_nothing(d, "/api/fault/b", "/api/fault/b/clear", &k, &fault).await;

    // The page's own request (app.js: fetch with JSON, the browser adds its Origin).
    let head = format!("host: {d}\r\norigin: http://{d}\r\n{JSON}");
    let (status, r) = http(d, "POST", "/api/fault/b/0", &head, r#"{"hang": true}"#).await;
    assert_eq!(status, 200, "{r}");
    assert!(k.get().hang);
    let (status, r) = http(d, "POST", "/api/fault/b/clear", &head, "{}").await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(k.get(), Fault::default());
    // The calculators are POSTs too.
    let form = format!("{}content-type: text/plain\r\n", host(d));
    let (status, _) = http(d, "POST", "/api/calc/fanout", &form, "{}").await;
    assert_eq!(status, 415);
    dash.stop();
    running.shutdown().await.unwrap();
}
