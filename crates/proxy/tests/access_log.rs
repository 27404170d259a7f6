//! The access log through real proxies: lines read back from the file and checked field by
//! field for a success, a retried call, a refusal and a local reply, in JSON and the common
//! form; a writer that cannot keep up drops lines and counts them, and requests still pass.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use support::*;

fn mesh(dir: &Path, b_log: &str) -> String {
    format!(
        "
mesh: {{ name: t, trust_domain: test.local }}
services:
  a:
    access_log: {{ to: '{a}', routes: [order, z] }}
    calls:
      b:
        timeout: 2s
        retries: {{ count: 2, on: [5xx], backoff: {{ base: 1ms, max: 2ms }} }}
        routes:
          order: {{ path: /order, idempotent: true }}
          other: {{ path: /other }}
      z: {{ timeout: 1s }}
  b:
    allow_paths: {{ /order/secret: [z] }}
    access_log: {b_log}
  z: {{}}
",
        a = dir.join("a.log").display(),
    )
}

/// b's app: 503 for the first `failures` requests, then 200 with a 2-byte body.
fn failing_first(failures: usize) -> Handler {
    let seen = Arc::new(AtomicUsize::new(0));
    Arc::new(move |_req| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
            if n < failures {
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            r
        })
    })
}

/// Waits (5 s at most) for `n` lines in `file`.
async fn lines(file: &Path, n: usize) -> Vec<String> {
    for _ in 0..500 {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.lines().count() >= n {
            return text.lines().map(str::to_owned).collect();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("fewer than {n} lines in {}", file.display());
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_request_is_logged_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let b_log = format!(
        "{{ format: common, to: '{}' }}",
        dir.path().join("b.log").display()
    );
    let f = Fixture::new(&mesh(dir.path(), &b_log));
    let app = backend(failing_first(1)).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(
        f.config("a"),
        &[("b", b.bound.inbound.unwrap()), ("z", closed_port())],
    ))
    .await;
    let port = a.bound.upstreams["b"];
    // A retried call (503, then 200), with a query that is not logged.
    let mut req = request("POST", "/order/7?token=secret", "b", b"{}");
    req.headers_mut()
        .insert("content-length", "2".parse().unwrap());
    req.headers_mut().insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap(),
    );
    assert_eq!(get(port, req).await.0, 200);
    // A success.
    assert_eq!(get(port, request("GET", "/order/8", "b", b"")).await.0, 200);
    // A refusal at b's inbound: /order/secret is z's alone.
    assert_eq!(
        get(port, request("GET", "/order/secret", "b", b"")).await.0,
        403
    );
    // A route a does not log.
    assert_eq!(get(port, request("GET", "/other", "b", b"")).await.0, 200);
    // A local reply: z has no copy that answers.
    let z = get(a.bound.upstreams["z"], request("GET", "/z", "z", b"")).await;
    assert_eq!(z.0, 503, "{z:?}");

    let a_lines = lines(&dir.path().join("a.log"), 4).await;
    assert_eq!(
        a_lines.len(),
        4,
        "the `other` route is not logged: {a_lines:#?}"
    );
    let retried = json(&a_lines[0]);
    assert_eq!(retried["direction"], "outbound");
    assert_eq!(retried["service"], "a");
    assert_eq!(retried["upstream"], "b");
    assert_eq!(retried["route"], "order");
    assert_eq!(retried["method"], "POST");
    assert_eq!(retried["authority"], "b");
    assert_eq!(retried["path"], "/order/7?…");
    assert_eq!(retried["status"], 200);
    assert_eq!(retried["tries"], 2);
    assert_eq!(retried["retries"], serde_json::json!(["5xx"]));
    assert_eq!(retried["retry_skipped"], serde_json::Value::Null);
    assert!(retried["copy"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_eq!(retried["bytes_in"], 2);
    assert_eq!(retried["bytes_out"], 2);
    assert_eq!(retried["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(retried["local_reply"], serde_json::Value::Null);
    let (total, own) = (
        retried["duration_us"].as_u64().unwrap(),
        retried["proxy_us"].as_u64().unwrap(),
    );
    assert!(own <= total, "{own} µs of {total} µs");
    assert!(retried["time"].as_str().unwrap().ends_with('Z'));

    let ok = json(&a_lines[1]);
    assert_eq!(
        (ok["status"].as_u64(), ok["tries"].as_u64()),
        (Some(200), Some(1))
    );
    assert_eq!(ok["retries"], serde_json::json!([]));
    assert_eq!(
        ok["trace_id"],
        serde_json::Value::Null,
        "no context, no mesh.tracing"
    );

    let refused = json(&a_lines[2]);
    assert_eq!(refused["status"], 403);
    assert_eq!(refused["tries"], 1, "403 is not retried");

    let local = json(&a_lines[3]);
    assert_eq!(local["upstream"], "z");
    assert_eq!(local["status"], 503);
    assert!(local["local_reply"].is_string(), "{local}");
    assert_eq!(local["bytes_in"], serde_json::Value::Null);

    // b's inbound side, in the common form: the caller, the refusal's reason.
    let b_lines = lines(&dir.path().join("b.log"), 5).await;
    assert!(
        b_lines[0].starts_with("- - spiffe://test.local/service/a ["),
        "{}",
        b_lines[0]
    );
    assert!(
        b_lines[0].contains("\"POST /order/7?…\" 503 "),
        "{}",
        b_lines[0]
    );
    assert!(b_lines[0].contains(" direction=inbound service=b upstream=- route=order "));
    assert!(b_lines[0].contains(" trace_id=4bf92f3577b34da6a3ce929d0e0e4736"));
    assert!(
        b_lines[1].contains("\"POST /order/7?…\" 200 2 "),
        "{}",
        b_lines[1]
    );
    let refusal = &b_lines[3];
    assert!(refusal.contains("\"GET /order/secret\" 403 "), "{refusal}");
    assert!(refusal.contains(" local_reply=forbidden "), "{refusal}");
    assert!(refusal.contains(" proxy_us="), "{refusal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_cannot_keep_up_drops_and_counts_and_requests_pass() {
    let dir = tempfile::tempdir().unwrap();
    // A pipe nobody reads: the writer stops when its 64 KiB buffer is full.
    let fifo = dir.path().join("b.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = fifo.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Blocks until the proxy opens the pipe for writing; then holds it open, unread.
        let f = std::fs::File::open(reader).unwrap();
        held_tx.send(f).unwrap();
    });
    let b_log = format!("{{ to: '{}', queue: 1 }}", fifo.display());
    let f = Fixture::new(&mesh(dir.path(), &b_log));
    let app = backend(failing_first(0)).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let _held = held_rx.recv().unwrap();
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let n = 600;
    for i in 0..n {
        let path = format!("/order/{i}");
        assert_eq!(
            get(a.bound.upstreams["b"], request("GET", &path, "b", b""))
                .await
                .0,
            200
        );
    }
    let m = metrics(&b).await;
    let dropped: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("hopwise_access_log_dropped_total "))
        .unwrap_or_else(|| panic!("no hopwise_access_log_dropped_total in\n{m}"))
        .parse()
        .unwrap();
    // Lines are over 300 bytes: at most ~220 fit the pipe, one the queue, one the writer.
    assert!(dropped >= 300, "{dropped} of {n} lines dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_caller_cancels_is_logged_with_how_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let b_file = dir.path().join("b.log");
    let f = Fixture::new(&mesh(
        dir.path(),
        &format!("{{ to: '{}' }}", b_file.display()),
    ));
    let app = backend(hanging()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    // a's app gives up on its own after 200 ms: a's request and b's both end unanswered.
    abandon(port, "/order/1", "", Duration::from_millis(200)).await;
    let gone = json(&lines(&b_file, 1).await[0]);
    assert_eq!(
        (&gone["status"], &gone["ended"], &gone["route"]),
        (&0.into(), &"caller-gone".into(), &"order".into()),
        "{gone}"
    );
    assert!(gone["duration_us"].as_u64().unwrap() >= 150_000, "{gone}");
    let a_gone = json(&lines(&dir.path().join("a.log"), 1).await[0]);
    assert_eq!(
        (&a_gone["direction"], &a_gone["ended"]),
        (&"outbound".into(), &"caller-gone".into()),
        "{a_gone}"
    );
    // a's app says it has 100 ms: a answers 504 at its deadline, and b, which was told the
    // time left, records the end as the deadline's.
    abandon(
        port,
        "/order/2",
        "x-hopwise-timeout-ms: 100\r\n",
        Duration::from_millis(600),
    )
    .await;
    let late = json(&lines(&b_file, 2).await[1]);
    assert_eq!(
        (&late["status"], &late["ended"]),
        (&0.into(), &"caller-deadline".into()),
        "{late}"
    );
    let a_late = json(&lines(&dir.path().join("a.log"), 2).await[1]);
    assert_eq!(a_late["status"], 504, "{a_late}");
    assert_eq!(a_late["ended"], serde_json::Value::Null, "{a_late}");
}

/// A request the callee's own routes took is logged with the route and the rule (named or
/// not), a 500 of a rule with no backend of weight too; each rule's requests are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_request_is_logged_with_its_route_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = format!(
        r#"
mesh: {{ name: t, trust_domain: test.local }}
services:
  a:
    access_log: {{ to: '{}' }}
    calls: {{ b: {{ timeout: 2s }} }}
  b:
    routes:
      canary:
        rules:
          - name: beta
            matches: [{{ headers: [{{ name: x-beta, value: "1" }}] }}]
            backends: [{{ service: b }}]
          - name: nowhere
            matches: [{{ path: {{ value: /zero }} }}]
            backends: [{{ service: b, weight: 0 }}]
          - backends: [{{ service: b }}]
"#,
        dir.path().join("a.log").display()
    );
    let f = Fixture::new(&mesh);
    let app = backend(echo()).await;
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let port = a.bound.upstreams["b"];
    let mut beta = request("GET", "/x", "b", b"");
    beta.headers_mut().insert("x-beta", "1".parse().unwrap());
    assert_eq!(get(port, beta).await.0, 200);
    assert_eq!(get(port, request("GET", "/x", "b", b"")).await.0, 200);
    assert_eq!(get(port, request("GET", "/zero", "b", b"")).await.0, 500);
    let logged: Vec<(serde_json::Value, serde_json::Value, serde_json::Value)> =
        (lines(&dir.path().join("a.log"), 3).await.iter())
            .map(|l| json(l))
            .map(|v| {
                (
                    v["http_route"].clone(),
                    v["rule"].clone(),
                    v["status"].clone(),
                )
            })
            .collect();
    let null = serde_json::Value::Null;
    assert_eq!(
        logged,
        [
            ("canary".into(), "beta".into(), 200.into()),
            ("canary".into(), null, 200.into()),
            ("canary".into(), "nowhere".into(), 500.into()),
        ]
    );
    // And counted by rule, an unnamed one by its place.
    let m = metrics(&a).await;
    for rule in ["beta", "nowhere", "rules[2]"] {
        let series = format!(
            r#"hopwise_route_rule_requests_total{{service="b",route="canary",rule="{rule}"}} 1"#
        );
        assert!(m.contains(&series), "{series}\n{m}");
    }
}
