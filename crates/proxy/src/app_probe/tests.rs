//! Each kind of probe run against a real app on loopback: an HTTP/1.1 server (plain and TLS
//! with a self-signed certificate), a TCP listener, the official gRPC health service
//! (tonic-health); and apps that are down or never answer.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use hopwise_model::app_probe::{Action, AppProbe, AppProbes, Header};
use http::{HeaderValue, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{AppProbeTarget, run};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn target(path: &str, action: Action, timeout_seconds: u32) -> AppProbeTarget {
    let mut probes = AppProbes::default();
    let probe = AppProbe {
        action,
        timeout_seconds,
    };
    probes.insert(path.to_owned(), probe).unwrap();
    AppProbeTarget { ip: LOCAL, probes }
}

/// What the app saw of the last request: its target and headers.
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

/// An HTTP/1.1 app answering `status` (changeable), over TLS when `tls` is given.
async fn app(tls: Option<tokio_rustls::TlsAcceptor>) -> (u16, Arc<AtomicU16>, Seen) {
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let status = Arc::new(AtomicU16::new(200));
    let seen: Seen = Arc::default();
    let (s, w) = (status.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (s, w, tls) = (s.clone(), w.clone(), tls.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let headers = req.headers().iter();
                    let headers = headers
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
                        .collect();
                    w.lock().unwrap().push((req.uri().to_string(), headers));
                    let mut answer = http::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from_static(b"app\n"),
                    ));
                    *answer.status_mut() = StatusCode::from_u16(s.load(Ordering::SeqCst)).unwrap();
                    async move { Ok::<_, Infallible>(answer) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(tls) => {
                        let Ok(stream) = tls.accept(tcp).await else {
                            return;
                        };
                        let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                }
            });
        }
    });
    (port, status, seen)
}

fn http_probe(port: u16, https: bool) -> Action {
    Action::Http {
        port,
        path: "/healthz?deep=1".into(),
        https,
        headers: vec![
            Header {
                name: "X-Probe".into(),
                value: "a".into(),
            },
            Header {
                name: "x-probe".into(),
                value: "b".into(),
            },
        ],
    }
}

#[tokio::test]
async fn an_http_probe_gets_the_apps_status_as_the_kubelet_would_send_it() {
    let (port, status, seen) = app(None).await;
    let t = target("/app-health/app/readyz", http_probe(port, false), 2);
    let kubelet = Some(HeaderValue::from_static("kube-probe/1.37"));
    let v = run(&t, "/app-health/app/readyz", kubelet.clone())
        .await
        .unwrap();
    assert_eq!(v.status, StatusCode::OK, "{v:?}");
    let (target, headers) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(target, "/healthz?deep=1");
    let has = |k: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(has("host"), [format!("127.0.0.1:{port}").as_str()]);
    assert_eq!(has("user-agent"), ["kube-probe/1.37"]);
    // The probe's headers, both values of a repeated one.
    assert_eq!(has("x-probe"), ["a", "b"]);
    // The app's own failure is passed on as its status; a redirect passes, as for the kubelet.
    for code in [500, 404, 302] {
        status.store(code, Ordering::SeqCst);
        let v = run(&t, "/app-health/app/readyz", kubelet.clone())
            .await
            .unwrap();
        assert_eq!(v.status.as_u16(), code, "{v:?}");
    }
    // A path injection wrote nothing at is not run.
    assert_eq!(run(&t, "/app-health/app/livez", None).await, None);
    assert_eq!(run(&t, "/app-health/other/readyz", None).await, None);
}

#[tokio::test]
async fn an_https_probe_does_tls_without_verifying_the_apps_certificate() {
    let cert = rcgen::generate_simple_self_signed(vec!["app.example".to_owned()]).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let (port, _, seen) = app(Some(Arc::new(config).into())).await;
    let t = target("/app-health/app/livez", http_probe(port, true), 2);
    let v = run(&t, "/app-health/app/livez", None).await.unwrap();
    assert_eq!(v.status, StatusCode::OK, "{v:?}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Plain HTTP to a TLS port fails.
    let t = target("/app-health/app/livez", http_probe(port, false), 2);
    let v = run(&t, "/app-health/app/livez", None).await.unwrap();
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = TcpListener::bind((LOCAL, 0)).await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_tcp_probe_passes_when_the_app_accepts_and_fails_when_it_is_down() {
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let t = target("/app-health/db/livez", Action::Tcp { port }, 1);
    let v = run(&t, "/app-health/db/livez", None).await.unwrap();
    assert_eq!(v.status, StatusCode::OK, "{v:?}");
    drop(listener);
    let v = run(&t, "/app-health/db/livez", None).await.unwrap();
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
    assert!(v.message.contains("cannot connect"), "{v:?}");
    let down = target(
        "/app-health/app/readyz",
        http_probe(closed_port().await, false),
        1,
    );
    let v = run(&down, "/app-health/app/readyz", None).await.unwrap();
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
}

#[tokio::test]
async fn a_probe_of_an_app_that_never_answers_fails_at_its_timeout() {
    // Accepts and holds every connection, reading nothing.
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let t = target("/app-health/app/readyz", http_probe(port, false), 1);
    let v = run(&t, "/app-health/app/readyz", None).await.unwrap();
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
    assert!(v.message.contains("within the probe's 1 s"), "{v:?}");
}

#[tokio::test]
async fn a_grpc_probe_asks_the_apps_health_service() {
    use tonic_health::ServingStatus;
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("shop.Cart", ServingStatus::NotServing)
        .await;
    let listener = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );
    let probe = |service: &str| {
        let action = Action::Grpc {
            port,
            service: service.into(),
        };
        target("/app-health/cart/readyz", action, 2)
    };
    let ask = |service: &str| {
        let t = probe(service);
        async move { run(&t, "/app-health/cart/readyz", None).await.unwrap() }
    };
    // The server as a whole ("") is serving from the start.
    assert_eq!(ask("").await.status, StatusCode::OK);
    let v = ask("shop.Cart").await;
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
    assert!(v.message.contains("NOT_SERVING"), "{v:?}");
    reporter
        .set_service_status("shop.Cart", ServingStatus::Serving)
        .await;
    assert_eq!(ask("shop.Cart").await.status, StatusCode::OK);
    // A service the server does not know: its NOT_FOUND status.
    let v = ask("shop.Other").await;
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
    assert!(v.message.contains("grpc-status 5"), "{v:?}");
    // Nothing listening.
    let down = Action::Grpc {
        port: closed_port().await,
        service: String::new(),
    };
    let t = target("/app-health/cart/readyz", down, 1);
    let v = run(&t, "/app-health/cart/readyz", None).await.unwrap();
    assert_eq!(v.status, StatusCode::SERVICE_UNAVAILABLE, "{v:?}");
}
