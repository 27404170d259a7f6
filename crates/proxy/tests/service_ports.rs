//! A service's `ports` at the callee's proxy, over real mutual TLS: the caller's
//! `x-hopwise-service-port` (the port its app dialed) leads to the app port the callee's own
//! `ports` map it to, and to nothing else — an unlisted or malformed one is refused 404
//! `no-port` before any app sees it; the header never reaches an app; and a caller's app that
//! writes the header itself through an explicit outbound port changes nothing.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hopwise_proxy::tls::{CertFiles, CertStore};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use rustls_pki_types::ServerName;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// An app that answers its name, and whether the proxy's header reached it.
fn named(name: &'static str) -> Handler {
    Arc::new(move |req: Request<Incoming>| {
        Box::pin(async move {
            let leaked = req.headers().contains_key("x-hopwise-service-port");
            Response::new(Full::new(Bytes::from(format!("{name} leaked={leaked}"))))
        })
    })
}

struct Setup {
    f: Fixture,
    main: Backend,
    admin: Backend,
    api: hopwise_proxy::Running,
}

/// `api`'s app listens on two ports: `main` (its app port, dialed as 80) and `admin` (9090).
async fn setup() -> Setup {
    let (main, admin) = (backend(named("main")).await, backend(named("admin")).await);
    let mesh = format!(
        "mesh: {{ name: p, trust_domain: ports.local }}
services:
  web: {{ calls: {{ api: {{}} }} }}
  api:
    ports: [{{ port: 80, target_port: {} }}, {{ port: 9090, target_port: {} }}]
",
        main.addr.port(),
        admin.addr.port()
    );
    let f = Fixture::new(&mesh);
    let api = start(inbound(f.config("api"), main.addr)).await;
    Setup {
        f,
        main,
        admin,
        api,
    }
}

/// One request over mutual TLS as `web`'s proxy would send it, with `port` as the header:
/// the status, `x-hopwise-error` and body.
async fn as_web(s: &Setup, port: Option<&str>) -> (u16, Option<String>, String) {
    let store = CertStore::open(CertFiles::in_dir(&s.f.certs(), "web")).unwrap();
    let config = store
        .client_config("spiffe://ports.local/service/api", b"http/1.1")
        .unwrap();
    let tcp = TcpStream::connect(s.api.bound.inbound.unwrap())
        .await
        .unwrap();
    let name = ServerName::try_from("api").unwrap();
    let mut tls = TlsConnector::from(config).connect(name, tcp).await.unwrap();
    let header = port.map_or(String::new(), |p| {
        format!("x-hopwise-service-port: {p}\r\n")
    });
    let head = format!("GET / HTTP/1.1\r\nhost: api\r\n{header}connection: close\r\n\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = (text.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let error = (text.lines())
        .find_map(|l| l.strip_prefix("x-hopwise-error: "))
        .map(str::to_owned);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, error, body)
}

#[tokio::test]
async fn the_dialed_port_reaches_its_target_and_only_a_listed_one() {
    let s = setup().await;
    let ok = |body: &str| (200, None, body.to_owned());
    assert_eq!(as_web(&s, Some("80")).await, ok("main leaked=false"));
    assert_eq!(as_web(&s, Some("9090")).await, ok("admin leaked=false"));
    assert_eq!(
        as_web(&s, None).await,
        ok("main leaked=false"),
        "no header: the app's port"
    );
    let (main, admin) = (
        s.main.hits.load(Ordering::SeqCst),
        s.admin.hits.load(Ordering::SeqCst),
    );
    assert_eq!((main, admin), (2, 1));
    // A target is not a dialed port; nor is a port nothing lists; nor what is not a port.
    let admin_port = s.admin.addr.port().to_string();
    for asked in [
        admin_port.as_str(),
        "22",
        "0",
        "70000",
        "80, 9090",
        "eighty",
    ] {
        let (status, error, _) = as_web(&s, Some(asked)).await;
        assert_eq!(
            (status, error.as_deref()),
            (404, Some("no-port")),
            "{asked}"
        );
    }
    assert_eq!(
        s.main.hits.load(Ordering::SeqCst),
        main,
        "no app saw a refused one"
    );
    assert_eq!(s.admin.hits.load(Ordering::SeqCst), admin);
    let m = metrics(&s.api).await;
    assert!(m.contains(r#"reason="no-port""#), "{m}");
}

#[tokio::test]
async fn an_apps_own_header_through_an_explicit_port_changes_nothing() {
    let s = setup().await;
    let web = start(outbound(
        s.f.config("web"),
        &[("api", s.api.bound.inbound.unwrap())],
    ))
    .await;
    let port: SocketAddr = web.bound.upstreams["api"];
    let mut req = request("GET", "/", "api", b"");
    req.headers_mut()
        .insert("x-hopwise-service-port", "9090".parse().unwrap());
    let (status, _, body) = get(port, req).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, "main leaked=false"));
    assert_eq!(s.admin.hits.load(Ordering::SeqCst), 0);
}
