//! The certificate `hopwise certs` issues to a service outside the mesh (`external:`) is a TLS
//! server's and nothing more: presented as a client certificate to a mesh member's inbound
//! port (mTLS, `allow: any`) it gets no request through, while a mesh member's certificate
//! from the same CA does. That it still serves the TLS the mesh's proxies verify is
//! `tests/fee.rs` (the seed's fee service runs on it).

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hopwise_proxy::tls::{CertFiles, CertStore};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use support::*;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const MESH: &str = "
mesh: { name: t, trust_domain: t.local }
services:
  a: { allow: any }
  b: { calls: { a: {}, fee: {} } }
  fee: { external: { address: \"localhost:8751\", tls: { server_name: localhost } } }
";

/// One request to `a`'s inbound port over mTLS as `who` (its files from `hopwise certs`):
/// the status, or why there was none.
async fn call_a_as(f: &Fixture, inbound: SocketAddr, who: &str) -> Result<u16, String> {
    let store = CertStore::open(CertFiles::in_dir(&f.certs(), who)).unwrap();
    let config = store
        .client_config("spiffe://t.local/service/a", b"http/1.1")
        .unwrap();
    let exchange = async {
        let tcp = TcpStream::connect(inbound).await.unwrap();
        let name = ServerName::try_from("a").unwrap();
        let tls = TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("http: {e}"))?;
        tokio::spawn(conn);
        let resp = send
            .send_request(request("GET", "/", "a", b""))
            .await
            .map_err(|e| format!("request: {e}"))?;
        Ok(resp.status().as_u16())
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| Err("no answer in 10 s".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_services_certificate_is_no_mesh_identity() {
    let f = Fixture::new(MESH);
    let app = backend(echo()).await;
    let a = start(inbound(f.config("a"), app.addr)).await;
    let port = a.bound.inbound.unwrap();

    // A mesh member from the same CA gets through (`allow: any`).
    assert_eq!(call_a_as(&f, port, "b").await, Ok(200));
    // The external service's certificate (serverAuth only, no SPIFFE URI) does not: the
    // handshake is refused (TLS 1.3: the client learns it at its first read).
    let refused = call_a_as(&f, port, "fee").await;
    assert!(
        refused.is_err(),
        "the fee's certificate called a: {refused:?}"
    );
    // The inbound proxy refused it in the handshake (webpki: clientAuth not in the EKU).
    let failed = r#"hopwise_tls_handshakes_total{direction="inbound",result="failed"} 1"#;
    let mut m = String::new();
    for _ in 0..100 {
        m = metrics(&a).await;
        if m.contains(failed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(m.contains(failed), "{m}");
    assert_eq!(
        app.hits.load(Ordering::SeqCst),
        1,
        "only b's request reached the app"
    );
}
