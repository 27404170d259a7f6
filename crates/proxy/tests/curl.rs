//! curl as the outside client: what a person (or a script, or an app's HTTP library) does to
//! a's proxy. Through an upstream port, through the HTTP-proxy port (`-x` and `http_proxy=`), a
//! POST with a body, HTTP/2 with prior knowledge, an unknown host.
//!
//! curl must be installed (scripts/test installs it); without it these tests fail, loudly.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hopwise_proxy::Running;
use support::*;

const TWO: &str = "
mesh: { name: t, trust_domain: test.local }
services:
  a:
    calls:
      b:
        timeout: 5s
        routes:
          balance: { path: /penalty/, method: GET }
          pay: { path: /penalty/pay, method: POST }
  b: {}
";

/// a's proxy → (mTLS) → b's proxy → b's echoing app.
async fn two_proxies() -> (Fixture, Running, Running) {
    let app = backend(echo()).await;
    let f = Fixture::new(TWO);
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    (f, a, b)
}

/// What curl got: status, HTTP version (`1.1`, `2`), the last response head, the body.
#[derive(Debug)]
struct Got {
    status: u16,
    version: String,
    head: String,
    body: String,
}

impl Got {
    /// The value of response header `name` (case-insensitive), if present.
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// Runs `curl` with `args` (plus `env`), with no proxy from the environment unless `env` sets
/// one. Fails the test with a clear message if curl is not installed.
async fn curl(args: &[&str], env: &[(&str, &str)]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let body = dir.path().join("body");
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["--silent", "--show-error", "--max-time", "20"])
        .arg("--dump-header")
        .arg(&head)
        .arg("--output")
        .arg(&body)
        .args(["--write-out", "%{http_code} %{http_version}"])
        .args(args)
        .kill_on_drop(true);
    for var in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd, args).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "curl {args:?} failed ({}): {stderr}",
        out.status
    );
    let (status, version) = stdout
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("unexpected --write-out output: {stdout:?}"));
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    // With `Expect: 100-continue` curl dumps the interim head first; keep the final one.
    let heads = read(&head);
    let last = heads
        .split("\r\n\r\n")
        .filter(|h| !h.trim().is_empty())
        .last()
        .unwrap_or_default()
        .to_owned();
    Got {
        status: status.parse().unwrap(),
        version: version.to_owned(),
        head: last,
        body: read(&body),
    }
}

/// Runs a prepared curl command, bounded; a missing curl fails the test with a clear message.
async fn run(mut cmd: tokio::process::Command, args: &[&str]) -> std::process::Output {
    match tokio::time::timeout(Duration::from_secs(30), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`curl` is not installed (or not on PATH): these tests need it; scripts/test \
             installs it (apt-get install curl)"
        ),
        Ok(Err(e)) => panic!("cannot run curl: {e}"),
        Err(_) => panic!("curl {args:?} did not finish within 30 s"),
    }
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_an_upstream_port() {
    let (_f, a, _b) = two_proxies().await;
    let port = a.bound.upstreams["b"];
    let got = curl(&["--noproxy", "*", &url(port, "/penalty/U-41?x=1")], &[]).await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.version, "1.1", "{got:?}");
    assert!(
        got.body.contains("peer=spiffe://test.local/service/a"),
        "{got:?}"
    );
    assert!(
        got.body.contains("method=GET") && got.body.contains("path=/penalty/U-41"),
        "{got:?}"
    );
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_requests_total{direction="outbound",service="b",route="balance"} 1"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_the_http_proxy_port() {
    let (_f, a, _b) = two_proxies().await;
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    // `curl -x`: the absolute form, routed by the URL's host.
    let got = curl(&["-x", &proxy, "http://b/penalty/U-41"], &[]).await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        got.body.contains("peer=spiffe://test.local/service/a")
            && got.body.contains("path=/penalty/U-41"),
        "{got:?}"
    );
    // The `http_proxy` way: what an app's HTTP library does when the variable is set.
    let got = curl(
        &["http://b.test.local/penalty/U-42"],
        &[("http_proxy", &proxy)],
    )
    .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(got.body.contains("path=/penalty/U-42"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_posts_a_body() {
    let (_f, a, _b) = two_proxies().await;
    let port = a.bound.upstreams["b"];
    let got = curl(
        &[
            "--noproxy",
            "*",
            "--data-binary",
            "member=U-41&amount=12.5",
            &url(port, "/penalty/pay"),
        ],
        &[],
    )
    .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        got.body.contains("method=POST") && got.body.contains("bytes=23"),
        "{got:?}"
    );
    // A 3 MiB upload from a file, through the HTTP-proxy port (curl may ask for
    // `100-continue`; either way every byte must arrive).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upload");
    std::fs::write(&file, vec![b'x'; 3 * 1024 * 1024]).unwrap();
    let at = format!("@{}", file.display());
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    let got = curl(
        &["-x", &proxy, "--data-binary", &at, "http://b/penalty/pay"],
        &[],
    )
    .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(got.body.contains("bytes=3145728"), "{got:?}");
    let m = metrics(&a).await;
    assert!(
        m.contains(r#"hopwise_requests_total{direction="outbound",service="b",route="pay"} 2"#),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http2_with_prior_knowledge() {
    let (_f, a, _b) = two_proxies().await;
    let port = a.bound.upstreams["b"];
    let got = curl(
        &[
            "--noproxy",
            "*",
            "--http2-prior-knowledge",
            &url(port, "/penalty/U-41"),
        ],
        &[],
    )
    .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.version, "2", "{got:?}");
    // b's app speaks HTTP/1.1: the proxies translate.
    assert!(
        got.body.contains("version=HTTP/1.1") && got.body.contains("path=/penalty/U-41"),
        "{got:?}"
    );
    assert!(
        got.body.contains("peer=spiffe://test.local/service/a"),
        "{got:?}"
    );
    let got = curl(
        &[
            "--noproxy",
            "*",
            "--http2-prior-knowledge",
            "--data-binary",
            "12.5",
            &url(port, "/penalty/pay"),
        ],
        &[],
    )
    .await;
    assert_eq!((got.status, got.version.as_str()), (200, "2"), "{got:?}");
    assert!(got.body.contains("bytes=4"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_to_an_unknown_host_gets_404_no_route() {
    let (_f, a, _b) = two_proxies().await;
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    let got = curl(&["-x", &proxy, "http://nowhere/penalty/U-41"], &[]).await;
    assert_eq!(got.status, 404, "{got:?}");
    assert_eq!(got.header("x-hopwise-error").as_deref(), Some("no-route"));
    assert!(got.body.contains("nowhere"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_cannot_claim_an_identity() {
    // The identity header is the mesh's to set: a client's own value never reaches the app.
    let (_f, a, _b) = two_proxies().await;
    let port = a.bound.upstreams["b"];
    let got = curl(
        &[
            "--noproxy",
            "*",
            "-H",
            "x-hopwise-peer-identity: spiffe://test.local/service/admin",
            &url(port, "/penalty/U-41"),
        ],
        &[],
    )
    .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(
        got.body.contains("peer=spiffe://test.local/service/a "),
        "{got:?}"
    );
    assert!(!got.body.contains("service/admin"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_to_a_host_outside_the_mesh_that_shares_a_first_label_gets_404() {
    // `http_proxy` is set for the whole app: its calls to hosts outside the mesh come here too.
    // Only `b`, `b:<port>` and `b.<trust domain>` name b (config.rs's own doc comment).
    let app = backend(echo()).await;
    let f = Fixture::new(TWO);
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    let got = curl(
        &["http://b.elsewhere.example/penalty/U-41"],
        &[("http_proxy", &proxy)],
    )
    .await;
    assert_eq!(got.status, 404, "{got:?}");
    assert_eq!(got.header("x-hopwise-error").as_deref(), Some("no-route"));
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_with_an_upper_case_host_reaches_the_service() {
    let (_f, a, _b) = two_proxies().await;
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    let got = curl(&["-x", &proxy, "http://B/penalty/U-41"], &[]).await;
    assert_eq!(got.status, 200, "{got:?}");
    assert!(got.body.contains("path=/penalty/U-41"), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_the_proxy_port_with_https_is_refused_before_the_app() {
    let app = backend(echo()).await;
    let f = Fixture::new(TWO);
    let b = start(inbound(f.config("b"), app.addr)).await;
    let a = start(outbound(f.config("a"), &[("b", b.bound.inbound.unwrap())])).await;
    let proxy = format!("http://{}", a.bound.outbound.unwrap());
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["--silent", "--show-error", "--max-time", "10"])
        .args(["-x", &proxy, "https://b/penalty/U-41"])
        .kill_on_drop(true);
    let out = run(cmd, &["-x", &proxy, "https://b/penalty/U-41"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    // Today: `CONNECT b:443` reaches b's app, the proxy answers 200, curl's TLS handshake then
    // dies in a tunnel that does not exist (curl exit 35).
    assert_eq!(
        app.hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "CONNECT reached the app: {stderr}"
    );
    assert!(stderr.contains("CONNECT tunnel failed"), "{stderr}");
}
