//! `hopwise gateway`'s front door (issue 29) driven by curl, the outside client: TLS with a
//! certificate per host name (SNI), each name routed to its own service through the real
//! proxies over mutual TLS to real apps, HTTP/1.1 and h2; plain HTTP; a path route; the rate
//! limit at the edge of its burst; forged identity headers; the callee's `allow` against the
//! gateway's SPIFFE identity. The mesh is `gateway/fixture.rs`'s.
//!
//! curl must be installed (scripts/test installs it); without it these tests fail, loudly.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

#[path = "gateway/fixture.rs"]
mod fixture;
mod support;

use std::time::Duration;

use tokio::time::Instant;

use fixture::*;
use hopwise_model::rate::Limit;

const EDGE_ID: &str = "spiffe://test.local/service/edge";

/// Two host names on one TLS port, each served its own certificate (checked by curl against
/// the test CA and read from its `-v` output) and routed to its own service, over h2 and
/// HTTP/1.1; the apps see the gateway's identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_tls_gets_each_hosts_certificate_and_its_service() {
    let e = edge(None).await;
    let ca = e.ca().display().to_string();
    for (name, path, app) in [
        ("shop.example", "/cart", "web"),
        ("api.example", "/v1/items", "api"),
    ] {
        for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
            let [resolve, to, url] = at("https", name, e.https(), path);
            let got = curl(&["-v", "--cacert", &ca, flag, &resolve, &to, &url]).await;
            assert!(got.ok, "{name} {flag}: {}", got.err);
            assert_eq!(got.out, format!("200 {version}"), "{}", got.err);
            assert_eq!(
                got.body,
                format!(
                    "app={app} path={path} peer={EDGE_ID} forged=- xfcc=- xff=127.0.0.1 xfp=https"
                )
            );
            // The certificate served is the one for the name asked.
            assert!(
                got.err.contains(&format!("subject: CN={name}")),
                "{name}: {}",
                got.err
            );
        }
    }
}

/// A name no certificate serves, and no name at all (an IP address sends none), end in the
/// handshake: no default certificate tells a prober anything. TLS 1.1 is refused; 1.2 is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_missing_server_name_and_old_tls_are_refused_in_the_handshake() {
    let e = edge(None).await;
    let ca = e.ca().display().to_string();
    let [resolve, to, url] = at("https", "evil.example", e.https(), "/");
    let got = curl(&["--insecure", &resolve, &to, &url]).await;
    assert!(!got.ok && got.out.starts_with("000"), "{got:?}");
    let by_ip = format!("https://{}/", e.https());
    let got = curl(&["--insecure", &by_ip]).await;
    assert!(!got.ok && got.out.starts_with("000"), "{got:?}");
    let [resolve, to, url] = at("https", "shop.example", e.https(), "/");
    let old = ["--tlsv1.1", "--tls-max", "1.1", "--cacert", &ca];
    let got = curl(&[&old[..], &[&resolve, &to, &url]].concat()).await;
    assert!(!got.ok, "TLS 1.1 let through: {got:?}");
    let tls12 = ["-v", "--tlsv1.2", "--tls-max", "1.2", "--cacert", &ca];
    let got = curl(&[&tls12[..], &[&resolve, &to, &url]].concat()).await;
    assert_eq!((got.ok, got.out.as_str()), (true, "200 2"), "{}", got.err);
    assert!(
        got.err.contains("SSL connection using TLSv1.2"),
        "{}",
        got.err
    );
}

/// Plain HTTP: by host and path, HTTP/1.1 and h2 with prior knowledge; a path no rule takes
/// is the Gateway API's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_routes_by_host_and_path() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "api.example", e.http(), "/v1/x");
    let got = curl(&[&r, &t, &url]).await;
    assert_eq!(got.out, "200 1.1", "{}", got.err);
    assert!(got.body.starts_with("app=api path=/v1/x "), "{}", got.body);
    let [r, t, url] = at("http", "shop.example", e.http(), "/x");
    let got = curl(&["--http2-prior-knowledge", &r, &t, &url]).await;
    assert_eq!(got.out, "200 2", "{}", got.err);
    assert!(got.body.starts_with("app=web path=/x "), "{}", got.body);
    // api.example's only rule is /v1: anything else is no route.
    let [r, t, url] = at("http", "api.example", e.http(), "/v2");
    let got = curl(&["-i", &r, &t, &url]).await;
    assert!(got.out.starts_with("404"), "{got:?}");
    assert!(
        got.body.contains("x-hopwise-error: no-route"),
        "{}",
        got.body
    );
}

/// A client's claim to an identity, or to any of the mesh's headers, never reaches an app; nor
/// its claim to another address or scheme.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identity_headers_never_reach_the_app() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/me");
    let forged = [
        "-H",
        "x-hopwise-peer-identity: spiffe://test.local/service/admin",
        "-H",
        "x-hopwise-forged: 1",
        "-H",
        "x-forwarded-client-cert: By=spiffe://test.local/service/admin",
        "-H",
        "x-forwarded-for: 10.1.2.3",
        "-H",
        "x-forwarded-proto: https",
    ];
    let got = curl(&[&forged[..], &[&r, &t, &url]].concat()).await;
    assert_eq!(got.out, "200 1.1", "{}", got.err);
    // The address and scheme the gateway saw, not what the client claimed.
    assert_eq!(
        got.body,
        format!("app=web path=/me peer={EDGE_ID} forged=- xfcc=- xff=127.0.0.1 xfp=http")
    );
}

/// The callee's proxy sees the gateway's SPIFFE identity: `admin` allows only `web`, so the
/// gateway is refused there (403 `forbidden`), while `web`, which allows it, answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callees_allow_sees_the_gateways_identity_and_refuses_it() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/admin/users");
    let got = curl(&["-i", &r, &t, &url]).await;
    assert!(got.out.starts_with("403"), "{got:?}");
    assert!(
        got.body.contains("x-hopwise-error: forbidden"),
        "{}",
        got.body
    );
    assert!(got.body.contains(EDGE_ID), "{}", got.body);
}

/// At the edge of its burst: 5 through, then 429 with `Retry-After` (rate 1 a second, so
/// curl's next requests within that second all find the bucket empty); counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_answers_429_with_retry_after_past_its_burst() {
    let e = edge(Some(Limit { rate: 1, burst: 5 })).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/");
    // One curl, one connection, eight requests back to back.
    let urls = [url.as_str(); 8];
    let mut args = vec!["-i", &r, &t];
    args.extend(urls.iter().flat_map(|u| ["-w", "\n@%{http_code}\n", *u]));
    let got = curl(&args).await;
    let text = format!("{}\n{}", got.body, got.out);
    let codes: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix('@')).collect();
    assert_eq!(
        codes,
        ["200", "200", "200", "200", "200", "429", "429", "429"],
        "{text}"
    );
    assert!(text.contains("retry-after: 1"), "{text}");
    assert!(
        text.contains("x-hopwise-limit: gateway.rate_limit.total"),
        "{text}"
    );
    let m = support::metrics(&e.gateway).await;
    let line = r#"hopwise_limits_tripped_total{service="edge",limit="gateway.rate_limit.total"} 3"#;
    assert!(m.contains(line), "{m}");
}

/// A renewed certificate is served from the next handshake on, with no restart (worker 0
/// reloads the gateway's files every 2 s, as the mesh's own); a change that does not load — a
/// certificate whose key on disk is not its own — keeps the one in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let e = edge(None).await;
    let [r, t, url] = at("https", "shop.example", e.https(), "/");
    let subject = || {
        let (r, t, url) = (r.clone(), t.clone(), url.clone());
        async move {
            let got = curl(&["-v", "--insecure", &r, &t, &url]).await;
            assert!(got.ok, "{}", got.err);
            let line = got.err.lines().find(|l| l.contains("subject: "));
            line.map(|l| l.trim().to_owned()).unwrap_or_default()
        }
    };
    assert!(subject().await.ends_with("subject: CN=shop.example"));
    let tls = e.f.dir.path().join("tls");
    write_self_signed(&tls, "shop.example", "renewed", true);
    let start = Instant::now();
    while !subject().await.ends_with("subject: CN=renewed") {
        assert!(start.elapsed() < Duration::from_secs(10), "never reloaded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Only the certificate replaced: its key is not the one on disk, so nothing changes.
    write_self_signed(&tls, "shop.example", "mismatched", false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(subject().await.ends_with("subject: CN=renewed"));
}

/// A body declared past `max_body_bytes` is refused before anything is sent on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_is_refused_with_413() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/upload");
    let body = "x".repeat(2000);
    let got = curl(&["--data-binary", &body, &r, &t, &url]).await;
    assert!(got.out.starts_with("413"), "{got:?}");
    let small = "x".repeat(1000);
    let got = curl(&["--data-binary", &small, &r, &t, &url]).await;
    assert!(got.out.starts_with("200"), "{got:?}");
}

/// A chunked body declares no length: one streaming past `max_body_bytes` is cut where it
/// crosses it and, no answer having begun, refused with 413; one within it passes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_past_the_limit_is_cut_and_refused_with_413() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/upload");
    let chunked = ["-i", "-H", "Transfer-Encoding: chunked", "--data-binary"];
    let (big, small) = ("x".repeat(2000), "x".repeat(1000));
    let got = curl(&[&chunked[..], &[&big, &r, &t, &url]].concat()).await;
    assert!(got.out.starts_with("413"), "{got:?}");
    assert!(
        got.body.contains("x-hopwise-error: body-too-large"),
        "{}",
        got.body
    );
    let got = curl(&[&chunked[..], &[&small, &r, &t, &url]].concat()).await;
    assert!(got.out.starts_with("200"), "{got:?}");
}

/// A client that sends its head and part of its body, then nothing, is answered 408 once the
/// body has stalled for `body_timeout` (before the route's own 2 s timeout), and the app's
/// connection is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_at_its_allowance() {
    let e = edge_with(|c| {
        if let Some(g) = c.gateway.as_mut() {
            g.gateway.body_timeout = hopwise_model::Dur(Duration::from_millis(300));
        }
    })
    .await;
    let head =
        b"POST /upload HTTP/1.1\r\nhost: shop.example\r\ncontent-length: 100\r\n\r\n0123456789";
    let got = support::raw(e.http(), head, Duration::from_secs(5)).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("x-hopwise-error: body-timeout"), "{got}");
}

/// The front door's own refusals are recorded as any answer: a line in the gateway's access
/// log naming the local reply, for a body declared too large and for a protocol switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_doors_refusals_are_in_the_access_log() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let file = log.path().display().to_string();
    let e = edge_with(|c| {
        c.access_log = Some(hopwise_model::observe::AccessLog {
            format: hopwise_model::raw::LogFormat::Json,
            file: Some(file.clone()),
            max_bytes: 10 * 1024 * 1024,
            routes: None,
            query: false,
            queue: 1024,
        });
    })
    .await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/upload");
    let got = curl(&["--data-binary", &"x".repeat(2000), &r, &t, &url]).await;
    assert!(got.out.starts_with("413"), "{got:?}");
    let [r, t, url] = at("http", "shop.example", e.http(), "/ws");
    let switch = ["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"];
    let got = curl(&[&switch[..], &[&r, &t, &url]].concat()).await;
    assert!(got.out.starts_with("501"), "{got:?}");
    let start = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if text.lines().count() >= 2 || start.elapsed() > Duration::from_secs(5) {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lines: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(u64, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["status"].as_u64().unwrap(),
                l["local_reply"].as_str().unwrap_or("-"),
                l["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (413, "body-too-large", "/upload"),
            (501, "upgrade-unsupported", "/ws")
        ],
        "{lines:?}"
    );
}

/// The listeners strangers reach are bounded as every listener: a connection that sends no
/// request head (plain) or no ClientHello (TLS) is closed at the header-read timeout, and past
/// the cap on open connections a new one is closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_open_ones_capped() {
    let e = edge_with(|c| {
        c.timeouts.header_read = Duration::from_millis(300);
        c.listeners.max_connections = 2;
    })
    .await;
    for addr in [e.http(), e.https()] {
        let start = Instant::now();
        let got = support::raw(addr, b"", Duration::from_secs(5)).await;
        let waited = start.elapsed();
        assert!(got.is_empty(), "{got}");
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
            "{addr}: closed after {waited:?}"
        );
    }
    // Two held open (half a request head each); the third is closed before a byte is read.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = tokio::net::TcpStream::connect(e.http()).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut tcp, b"GET / HTTP/1.1\r\n")
            .await
            .unwrap();
        held.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let got = support::raw(
        e.http(),
        b"GET / HTTP/1.1\r\nhost: shop.example\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(got.is_empty(), "a third connection was served: {got}");
    assert!(
        start.elapsed() < Duration::from_millis(250),
        "{:?}",
        start.elapsed()
    );
    drop(held);
}

/// A WebSocket `Upgrade` is not carried through the front door: no tunnel from outside into
/// the mesh, and no app reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_switch_is_refused_at_the_front_door() {
    let e = edge(None).await;
    let [r, t, url] = at("http", "shop.example", e.http(), "/ws");
    let switch = [
        "-i",
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: websocket",
    ];
    let got = curl(&[&switch[..], &[&r, &t, &url]].concat()).await;
    assert!(got.out.starts_with("501"), "{got:?}");
    assert!(
        got.body.contains("x-hopwise-error: upgrade-unsupported"),
        "{}",
        got.body
    );
}
