//! A captured connection's entry point (`opaque::captured::serve`, capture's contract) with a
//! real callee proxy over mutual TLS: a declared opaque port goes into a tunnel with no
//! detection; on an undeclared port HTTP bytes take the HTTP path with every sniffed byte still
//! to read, and bytes that are not HTTP — sent, or a silent client's none — are refused, never
//! carried to a port the mesh file did not open.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hopwise_proxy::live::Live;
use hopwise_proxy::metrics::Metrics;
use hopwise_proxy::opaque::captured::{self, Destination};
use hopwise_proxy::tls::{CertFiles, CertStore};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(10);

/// An app that echoes what it reads, on a port of its own.
async fn echo_app() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

struct Caller {
    live: Arc<Live>,
    metrics: Arc<Metrics>,
    _callee: hopwise_proxy::Running,
    _f: Fixture,
}

/// `kv` has an HTTP app and one opaque port (`opaque`'s echo); `a`'s state calls it.
async fn caller(opaque: SocketAddr) -> Caller {
    let mesh = format!(
        "mesh: {{ name: t, trust_domain: test.local }}
services:
  a: {{ calls: {{ kv: {{}} }} }}
  kv: {{ tcp: {{ ports: [{}] }} }}
",
        opaque.port()
    );
    let f = Fixture::new(&mesh);
    let http_app = backend(echo()).await;
    let callee = start(inbound(f.config("kv"), http_app.addr)).await;
    let config = outbound(f.config("a"), &[("kv", callee.bound.inbound.unwrap())]);
    let store = CertStore::open(CertFiles::in_dir(&f.certs(), "a")).unwrap();
    let metrics = Metrics::new();
    let ports = vec!["kv".to_owned()];
    let live = Arc::new(Live::build(config, Some(&store), &metrics, 1, &ports, None).unwrap());
    Caller {
        live,
        metrics,
        _callee: callee,
        _f: f,
    }
}

/// A connected pair: the app's end, and the accepted end capture would hand over.
async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    (app, l.accept().await.unwrap().0)
}

/// Serves `accepted` as a captured connection to `kv:port`; says what the HTTP path got.
fn serve(c: &Caller, accepted: TcpStream, port: u16) -> tokio::task::JoinHandle<Option<Vec<u8>>> {
    let (live, metrics) = (c.live.clone(), c.metrics.clone());
    tokio::spawn(async move {
        let mut http = None;
        let to = Destination {
            service: "kv",
            port,
            target: hopwise_model::ports::Target::App,
        };
        captured::serve(&live, 0, &metrics, accepted, to, |mut tcp, _proto| {
            let got = &mut http;
            async move {
                let mut head = vec![0u8; 18];
                tcp.read_exact(&mut head).await.unwrap();
                *got = Some(head);
            }
        })
        .await;
        http
    })
}

fn refused(c: &Caller) -> f64 {
    let series =
        r#"hopwise_tcp_refused_total{direction="outbound",service="kv",reason="not-opaque"}"#;
    c.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_port_is_tunnelled_without_detection() {
    let opaque = echo_app().await;
    let c = caller(opaque).await;
    let (mut app, accepted) = pair().await;
    let served = serve(&c, accepted, opaque.port());
    // `GET ` would be HTTP if it were detected: on a declared port it is bytes.
    app.write_all(b"GET is a Redis command too\r\n")
        .await
        .unwrap();
    let mut back = [0u8; 28];
    tokio::time::timeout(LIMIT, app.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"GET is a Redis command too\r\n");
    drop(app);
    assert_eq!(
        tokio::time::timeout(LIMIT, served).await.unwrap().unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_on_an_undeclared_port_takes_the_http_path_with_every_byte() {
    let c = caller(echo_app().await).await;
    let (mut app, accepted) = pair().await;
    let served = serve(&c, accepted, 80);
    // In two writes: detection waits for a method's end before it decides.
    app.write_all(b"GE").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    app.write_all(b"T /penalty HTTP/1.1\r\n\r\n").await.unwrap();
    let http = tokio::time::timeout(LIMIT, served).await.unwrap().unwrap();
    assert_eq!(http.as_deref(), Some(&b"GET /penalty HTTP/1"[..18]));
    assert_eq!(refused(&c), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_http_on_an_undeclared_port_is_refused() {
    let c = caller(echo_app().await).await;
    // TLS from the app (a ClientHello's first bytes), then a client that says nothing.
    let (mut tls, accepted) = pair().await;
    let served = serve(&c, accepted, 443);
    tls.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, served).await.unwrap().unwrap(),
        None
    );
    let (mut silent, accepted) = pair().await;
    let served = serve(&c, accepted, 3306);
    assert_eq!(
        tokio::time::timeout(LIMIT, served).await.unwrap().unwrap(),
        None
    );
    assert_eq!(refused(&c), 2.0);
    let mut buf = [0u8; 1];
    let end = tokio::time::timeout(LIMIT, silent.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(
        end.map_err(|e| e.kind()).unwrap_err(),
        std::io::ErrorKind::ConnectionReset
    );
}

/// A whole-TCP service whose `ports` map the dialed port: the tunnel names the target, and
/// the callee's proxy carries it there — its app's other port, not its app's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_tcp_service_takes_the_dialed_port_to_its_listed_target() {
    let other = echo_app().await;
    let mesh = format!(
        "mesh: {{ name: t, trust_domain: test.local }}
services:
  a: {{ calls: {{ db: {{}} }} }}
  db: {{ tcp: {{}}, ports: [{{ port: 5432, target_port: {} }}] }}
",
        other.port()
    );
    let f = Fixture::new(&mesh);
    // The app's own port is a plain listener that never answers a byte.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let callee = start(inbound(f.config("db"), silent.local_addr().unwrap())).await;
    let config = outbound(f.config("a"), &[("db", callee.bound.inbound.unwrap())]);
    let store = CertStore::open(CertFiles::in_dir(&f.certs(), "a")).unwrap();
    let metrics = Metrics::new();
    let live = Arc::new(Live::build(config, Some(&store), &metrics, 1, &[], None).unwrap());
    let (mut app, accepted) = pair().await;
    let to = Destination {
        service: "db",
        port: 5432,
        target: hopwise_model::ports::Target::Port(other.port()),
    };
    let served = tokio::spawn({
        let (live, metrics) = (live.clone(), metrics.clone());
        async move {
            captured::serve(&live, 0, &metrics, accepted, to, |_, _| async {}).await;
        }
    });
    app.write_all(b"\x00\x00\x00\x08startup").await.unwrap();
    let mut back = [0u8; 11];
    tokio::time::timeout(LIMIT, app.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"\x00\x00\x00\x08startup");
    drop(app);
    tokio::time::timeout(LIMIT, served).await.unwrap().unwrap();
}
