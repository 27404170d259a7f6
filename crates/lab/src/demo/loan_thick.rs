//! The thick loan service (the seed's loan-thick.mjs): every network concern lives in its own
//! code — its TLS client with the fee's CA, a 400 ms timeout, 3 tries for a GET only (the
//! `safe` function), its own counters by action. Each line that carries one of them ends in a
//! marker the measurement counts from this file's text: tls, timeout, retry or metric, in
//! brackets after `//`; the line that decides whether a call may be repeated also says safety.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject; // [tls]
use rustls::pki_types::{CertificateDer, ServerName}; // [tls]
use rustls::{ClientConfig, RootCertStore}; // [tls]
use serde::Serialize;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector; // [tls]

use crate::error::LabError;
use crate::samples::wire::{self, Handler, Server};

const TIMEOUT: Duration = Duration::from_millis(400); // [timeout]
const RETRY: u32 = 3; // [retry]

/// Requests, tries and errors of one action.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)] // [metric]
pub struct Metric {
    pub requests: u64, // [metric]
    pub tries: u64,    // [metric]
    pub errors: u64,   // [metric]
}

pub struct LoanThick {
    fee: SocketAddr,
    tls: TlsConnector,                       // [tls]
    metric: Mutex<BTreeMap<String, Metric>>, // [metric]
}

impl std::fmt::Debug for LoanThick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanThick").field("fee", &self.fee).finish()
    }
}

impl LoanThick {
    /// The service on `listener`, calling the fee's work endpoint `fee` with `ca` trusted.
    pub fn start(listener: TcpListener, fee: SocketAddr, ca: &Path) -> Result<Server, LabError> {
        let certs = CertificateDer::pem_file_iter(ca).map_err(ca_error)?; // [tls]
        let certs: Vec<_> = certs.collect::<Result<_, _>>().map_err(ca_error)?; // [tls]
        let mut roots = RootCertStore::empty(); // [tls]
        roots.add_parsable_certificates(certs); // [tls]
        let provider = Arc::new(rustls::crypto::ring::default_provider()); // [tls]
        let config = ClientConfig::builder_with_provider(provider) // [tls]
            .with_safe_default_protocol_versions() // [tls]
            .map_err(ca_error)? // [tls]
            .with_root_certificates(roots) // [tls]
            .with_no_client_auth(); // [tls]
        let loan = Arc::new(LoanThick {
            fee,
            tls: TlsConnector::from(Arc::new(config)), // [tls]
            metric: Mutex::new(BTreeMap::new()),       // [metric]
        });
        let handler: Handler = Arc::new(move |req: Request<Incoming>| {
            let loan = loan.clone();
            Box::pin(async move { loan.handle(req.uri().path()).await })
        });
        Ok(wire::serve(listener, handler, None))
    }

    /// One try: a TLS connection to the fee service, one HTTP/1.1 request.
    async fn call(&self, path: &str, method: &Method) -> Result<(u16, String), String> {
        let tcp = TcpStream::connect(self.fee).await.map_err(text)?;
        let name = ServerName::try_from("localhost").map_err(text)?; // [tls]
        let tls = self.tls.connect(name, tcp).await.map_err(text)?; // [tls]
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(text)?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .body(Full::new(Bytes::new()))
            .map_err(text)?;
        let resp = send.send_request(req).await.map_err(text)?;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(text)?;
        Ok((code, String::from_utf8_lossy(&body.to_bytes()).into_owned()))
    }

    /// One try within the timeout; a failure to get an answer is a 502, a timeout a 504.
    async fn call_in_time(&self, path: &str, method: &Method) -> (u16, String) {
        let answer = tokio::time::timeout(TIMEOUT, self.call(path, method)).await; // [timeout]
        match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => (502, e),
            Err(_) => (504, "timeout".to_owned()), // [timeout]
        }
    }

    fn metrics(&self) -> MutexGuard<'_, BTreeMap<String, Metric>> {
        self.metric.lock().unwrap_or_else(PoisonError::into_inner) // [metric]
    }

    fn count(&self, action: &str, f: impl FnOnce(&mut Metric)) {
        f(self.metrics().entry(action.to_owned()).or_default()); // [metric]
    }

    // One statement per line (rustfmt would move the markers off the loop's lines).
    #[rustfmt::skip]
    async fn attempt(&self, path: &str, method: &Method, action: &str) -> (u16, String) {
        self.count(action, |o| o.requests += 1); // [metric]
        let mut last = (502, String::new());
        for _ in 0..if safe(method) { RETRY } else { 1 } { // [retry]
            self.count(action, |o| o.tries += 1); // [metric]
            last = self.call_in_time(path, method).await;
            if last.0 < 500 { break; } // [retry]
        }
        if last.0 >= 500 { self.count(action, |o| o.errors += 1); } // [metric]
        last
    }

    async fn handle(&self, url: &str) -> http::Response<Full<Bytes>> {
        let mut parts = url.split('/').filter(|s| !s.is_empty());
        let (root, member) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (path, method) = match root {
            "metric" => return wire::json(200, &json!(*self.metrics())), // [metric]
            "pay" => ("/penalty/pay".to_owned(), Method::POST),
            _ => (format!("/penalty/{member}"), Method::GET),
        };
        let (code, body) = self.attempt(&path, &method, root).await;
        wire::json(code, &json!({ "action": root, "code": code, "body": body }))
    }
}

/// Only an idempotent call is retried.
fn safe(method: &Method) -> bool {
    method == Method::GET // [retry] [safety]
}

fn ca_error(e: impl std::fmt::Display) -> LabError {
    LabError::Failed(format!("the thick loan service's CA: {e}"))
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}
