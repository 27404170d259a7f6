//! The thin loan service (the seed's loan-thin.mjs): the same jobs as the thick one, each a
//! plain call to a local address — its sidecar's port for the fee service. No TLS, no timeout,
//! no retry, no counter here: those lines moved to the `hopwise proxy` in front of it. What
//! cannot move is the knowledge of which call is safe to repeat; with `idempotency_keys` the
//! payment carries an `Idempotency-Key` (that line is marked for the count, as safety in
//! brackets after `//`), so the sidecar may retry it and the fee service can deduplicate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::json;
use tokio::net::TcpListener;

use crate::samples::wire::{self, Handler, Server};

#[derive(Debug)]
pub struct LoanThin {
    sidecar: SocketAddr,
    idempotency_keys: bool,
    payments: AtomicU64,
}

impl LoanThin {
    /// The service on `listener`, calling the fee service through `sidecar` (a local port).
    pub fn start(listener: TcpListener, sidecar: SocketAddr, idempotency_keys: bool) -> Server {
        let loan = Arc::new(LoanThin {
            sidecar,
            idempotency_keys,
            payments: AtomicU64::new(0),
        });
        let handler: Handler = Arc::new(move |req: Request<Incoming>| {
            let loan = loan.clone();
            Box::pin(async move { loan.handle(req.uri().path()).await })
        });
        wire::serve(listener, handler, None)
    }

    async fn attempt(&self, path: &str, method: &Method, member: &str) -> (u16, String) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "fee");
        if self.idempotency_keys && method == Method::POST {
            let n = self.payments.fetch_add(1, Ordering::SeqCst) + 1;
            req = req.header("idempotency-key", format!("pay-{member}-{n}")); // [safety]
        }
        let sent = match req.body(Full::new(Bytes::new())) {
            Ok(req) => wire::send_h1(self.sidecar, req).await,
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(r) => (r.status, r.text()),
            Err(e) => (502, e),
        }
    }

    async fn handle(&self, url: &str) -> http::Response<Full<Bytes>> {
        let mut parts = url.split('/').filter(|s| !s.is_empty());
        let (root, member) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (path, method) = match root {
            "pay" => ("/penalty/pay".to_owned(), Method::POST),
            _ => (format!("/penalty/{member}"), Method::GET),
        };
        let (code, body) = self.attempt(&path, &method, member).await;
        wire::json(code, &json!({ "action": root, "code": code, "body": body }))
    }
}
