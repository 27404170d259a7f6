//! The seed "Service Mesh"'s fee certificate, used as written: the seed's own `openssl req -x509`
//! line (Debian package `openssl`) makes a self-signed certificate with CA:TRUE for
//! `IP:127.0.0.1`, a real TLS fee service serves it, and it is loan's sidecar's
//! `external.tls.ca_file`. The sidecar takes it as a pin (docs/config.md, `external`): the
//! request goes through. Another certificate made by the same line (same subject, another key),
//! the same certificate past its end, and one for another address are refused before any request
//! reaches the fee, with the give-up table's answer for a failed handshake: 503, `tls`.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::*;
use tokio::net::TcpListener;

/// A certificate and its key on disk.
struct Made {
    cert: PathBuf,
    key: PathBuf,
}

/// The seed's line, with `san` for its `subjectAltName` (the seed's is `IP:127.0.0.1`), run in
/// `dir`; the files are `<name>.pem` and `<name>-key.pem`.
fn seed_openssl(dir: &Path, name: &str, san: &str) -> Made {
    let made = Made {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-addext"])
        .arg(format!("subjectAltName={san}"))
        .arg("-keyout")
        .arg(&made.key)
        .arg("-out")
        .arg(&made.cert)
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl (Debian package openssl; scripts/test installs it) cannot run: {e}")
        });
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    made
}

/// The seed's certificate made again from its own key and subject, CA:TRUE and
/// `IP:127.0.0.1`, but whose one day ended in 2025 (openssl's `req` cannot backdate).
fn expired_twin(dir: &Path, seed: &Made) -> Made {
    let key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(&seed.key).unwrap()).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.subject_alt_names = vec![rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2025, 1, 2);
    let cert = params.self_signed(&key).unwrap();
    let made = Made {
        cert: dir.join("expired.pem"),
        key: seed.key.clone(),
    };
    std::fs::write(&made.cert, cert.pem()).unwrap();
    made
}

/// The fee service over TLS with `served`'s certificate on `work`: each request that reaches
/// it is counted and answered `200 {"balance":12.5}`.
fn fee(work: TcpListener, served: &Made) -> Arc<AtomicU32> {
    let acceptor = support::tls_server::https_acceptor(&served.cert, &served.key);
    let hits = Arc::new(AtomicU32::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = work.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |_: Request<Incoming>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = Bytes::from_static(br#"{"balance":12.5}"#);
                    async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    hits
}

/// loan's sidecar toward the fee at `127.0.0.1:<port>`, `ca_file: pin.pem` (and `tls_extra`).
struct Setup {
    f: Fixture,
    work: TcpListener,
}

async fn setup(tls_extra: &str) -> Setup {
    let work = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = work.local_addr().unwrap().port();
    let f = Fixture::new(&format!(
        "
mesh: {{ name: library, trust_domain: library.local }}
services:
  loan: {{ calls: {{ fee: {{ timeout: 2s }} }} }}
  fee:
    external: {{ address: \"127.0.0.1:{port}\", tls: {{ ca_file: pin.pem{tls_extra} }} }}
"
    ));
    Setup { f, work }
}

/// Pins `pinned` (copied to `pin.pem`), serves `served`, and asks for a balance once through
/// the sidecar: the status, `x-hopwise-error`, the body, the requests the fee counted and the
/// sidecar's `/metrics`.
async fn ask(s: Setup, pinned: &Made, served: &Made) -> (u16, String, String, u32, String) {
    std::fs::copy(&pinned.cert, s.f.dir.path().join("pin.pem")).unwrap();
    let hits = fee(s.work, served);
    let sidecar = start(outbound(s.f.config("loan"), &[])).await;
    let port: SocketAddr = sidecar.bound.upstreams["fee"];
    let (status, headers, body) = get(port, request("GET", "/penalty/U-41", "fee", b"")).await;
    let error = headers
        .get("x-hopwise-error")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let m = metrics(&sidecar).await;
    (status.as_u16(), error, body, hits.load(Ordering::SeqCst), m)
}

const HANDSHAKE_OK: &str = r#"hopwise_tls_handshakes_total{direction="outbound",result="ok"}"#;

/// A refusal as the give-up table says: 503 `tls`, nothing reached the fee, no handshake
/// succeeded; the body says why (`why`).
fn assert_refused(got: (u16, String, String, u32, String), why: &str) {
    let (status, error, body, hits, m) = got;
    assert_eq!((status, error.as_str()), (503, "tls"), "{body}");
    assert!(body.contains(why), "{why:?} not in {body:?}");
    assert_eq!(hits, 0, "a request reached the fee");
    assert!(!m.contains(HANDSHAKE_OK), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_own_certificate_is_pinned_and_the_fee_answers() {
    let s = setup("").await;
    let seed = seed_openssl(s.f.dir.path(), "seed", "IP:127.0.0.1");
    let (status, error, body, hits, m) = ask(s, &seed, &seed).await;
    assert_eq!((status, error.as_str()), (200, ""), "{body}");
    assert_eq!(body, r#"{"balance":12.5}"#);
    assert_eq!(hits, 1);
    assert!(m.contains(&format!("{HANDSHAKE_OK} 1")), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_certificate_from_the_same_line_is_refused() {
    let s = setup("").await;
    let pinned = seed_openssl(s.f.dir.path(), "seed", "IP:127.0.0.1");
    // Same subject, same SAN, same dates; another key, so other bytes.
    let twin = seed_openssl(s.f.dir.path(), "twin", "IP:127.0.0.1");
    assert_ne!(
        std::fs::read(&pinned.cert).unwrap(),
        std::fs::read(&twin.cert).unwrap()
    );
    // Verified with the pin as its root: CA:TRUE, so webpki's own refusal.
    assert_refused(ask(s, &pinned, &twin).await, "CaUsedAsEndEntity");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_certificate_past_its_end_is_refused() {
    let s = setup("").await;
    let seed = seed_openssl(s.f.dir.path(), "seed", "IP:127.0.0.1");
    let expired = expired_twin(s.f.dir.path(), &seed);
    assert_refused(ask(s, &expired, &expired).await, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_address_is_refused() {
    let s = setup("").await;
    let other = seed_openssl(s.f.dir.path(), "other", "IP:127.0.0.2");
    assert_refused(ask(s, &other, &other).await, "not valid for name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_common_name_is_no_name_to_dial() {
    // The seed's certificate says CN=localhost, but its SAN holds only the IP: dialled as
    // `localhost`, it names nothing.
    let s = setup(", server_name: localhost").await;
    let seed = seed_openssl(s.f.dir.path(), "seed", "IP:127.0.0.1");
    assert_refused(ask(s, &seed, &seed).await, "not valid for name");
}
