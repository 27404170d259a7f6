//! A sample copy's fault knobs: what they are ([`Fault`]), how a partial JSON object changes
//! them ([`Fault::merged`], every field checked), what one request gets ([`Knobs::decide`]),
//! and the small HTTP server that serves them on their own port (so a copy that is "down"
//! still answers here).
//!
//! The contract (the dashboard depends on it): `GET /fault` → the whole state as JSON;
//! `POST /fault` with a partial object → merged, the whole new state back (400 with the
//! reason on a bad field or value); `POST /fault/clear` → everything back to the default.
//! Every request passes [`hopwise_model::browser_guard`] first: `Host` one of this port's own
//! loopback names (403), and each POST `content-type: application/json` (415) with no `Origin`
//! or this port's own (403) — a web page cannot set a fault through the user's browser.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::wire::{self, Handler, Server};

/// The longest added latency a knob accepts (10 minutes).
pub const MAX_LATENCY_MS: u64 = 600_000;

/// The knobs of one copy. The default is "no fault".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Share of requests answered 503 (gRPC: UNAVAILABLE), 0.0–1.0.
    pub error_rate: f64,
    /// Added before answering.
    pub latency_ms: u64,
    /// The app port refuses connections (it stops listening) until cleared.
    pub down: bool,
    /// Accept the request and never answer.
    pub hang: bool,
    /// The next N requests fail (503 / UNAVAILABLE); counts down.
    pub fail_first: u64,
    /// Do the work (the fee collects the payment), then drop the connection unanswered.
    pub lose_response: bool,
}

/// Why a change to the knobs was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KnobError {
    #[error("the body is not a JSON object: {0}")]
    NotJson(String),
    #[error("unknown field `{0}`; the knobs are {FIELDS}")]
    Unknown(String),
    #[error("`{field}`: {why}")]
    Bad { field: &'static str, why: String },
}

const FIELDS: &str = "error_rate, latency_ms, down, hang, fail_first, lose_response";

impl Fault {
    /// This state with the fields of `body` (a JSON object, any subset of the fields) changed;
    /// the first bad field refuses the whole change.
    pub fn merged(&self, body: &[u8]) -> Result<Fault, KnobError> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| KnobError::NotJson(e.to_string()))?;
        let serde_json::Value::Object(map) = value else {
            return Err(KnobError::NotJson(format!("found {value}")));
        };
        let mut out = self.clone();
        for (key, v) in &map {
            match key.as_str() {
                "error_rate" => {
                    let r = v.as_f64().ok_or_else(|| bad("error_rate", "a number", v))?;
                    if !(0.0..=1.0).contains(&r) {
                        return Err(KnobError::Bad {
                            field: "error_rate",
                            why: format!("{r} is not a share between 0.0 and 1.0 (20 % is 0.2)"),
                        });
                    }
                    out.error_rate = r;
                }
                "latency_ms" => {
                    let ms = v
                        .as_u64()
                        .ok_or_else(|| bad("latency_ms", "a whole number of milliseconds", v))?;
                    if ms > MAX_LATENCY_MS {
                        return Err(KnobError::Bad {
                            field: "latency_ms",
                            why: format!("{ms} is more than {MAX_LATENCY_MS} (10 minutes)"),
                        });
                    }
                    out.latency_ms = ms;
                }
                "fail_first" => {
                    out.fail_first = v
                        .as_u64()
                        .ok_or_else(|| bad("fail_first", "a whole number", v))?;
                }
                "down" => out.down = flag("down", v)?,
                "hang" => out.hang = flag("hang", v)?,
                "lose_response" => out.lose_response = flag("lose_response", v)?,
                other => return Err(KnobError::Unknown(other.to_owned())),
            }
        }
        Ok(out)
    }
}

fn bad(field: &'static str, what: &str, v: &serde_json::Value) -> KnobError {
    KnobError::Bad {
        field,
        why: format!("expected {what}, found {v}"),
    }
}

fn flag(field: &'static str, v: &serde_json::Value) -> Result<bool, KnobError> {
    v.as_bool().ok_or_else(|| bad(field, "true or false", v))
}

/// What one request gets, decided when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    pub hang: bool,
    pub latency: Duration,
    /// Answer 503 / UNAVAILABLE instead of doing the work.
    pub fail: bool,
    /// Do the work, then drop the connection.
    pub lose: bool,
}

/// The live knobs of one copy, shared by its app server and its knob server.
#[derive(Debug)]
pub struct Knobs {
    state: Mutex<Fault>,
    /// `down`, watched by the app's listener.
    down: watch::Sender<bool>,
}

impl Knobs {
    pub fn new() -> Arc<Knobs> {
        Arc::new(Knobs {
            state: Mutex::new(Fault::default()),
            down: watch::Sender::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Fault> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn get(&self) -> Fault {
        self.lock().clone()
    }

    pub fn set(&self, fault: Fault) {
        let down = fault.down;
        *self.lock() = fault;
        self.down.send_replace(down);
    }

    /// Follows `down`: the app's listener stops and starts with it.
    pub fn watch_down(&self) -> watch::Receiver<bool> {
        self.down.subscribe()
    }

    /// The fate of one request; counts `fail_first` down.
    pub fn decide(&self) -> Decision {
        let mut f = self.lock();
        let fail = if f.fail_first > 0 {
            f.fail_first -= 1;
            true
        } else {
            f.error_rate > 0.0 && fastrand::f64() < f.error_rate
        };
        Decision {
            hang: f.hang,
            latency: Duration::from_millis(f.latency_ms),
            fail,
            lose: f.lose_response,
        }
    }
}

/// The largest knob request body read.
const MAX_BODY: usize = 64 * 1024;

/// Serves the knobs on `listener` until dropped.
pub fn serve(listener: TcpListener, knobs: Arc<Knobs>) -> Server {
    // Port 0 (the address unknown) is a name no request can give: everything is refused.
    let port = listener.local_addr().map_or(0, |a| a.port());
    let handler: Handler = Arc::new(move |req: Request<Incoming>| {
        let knobs = knobs.clone();
        Box::pin(async move { answer(&knobs, port, req).await })
    });
    wire::serve(listener, handler, None)
}

async fn answer(knobs: &Knobs, port: u16, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let refuse = |code: u16, why: String| wire::json(code, &json!({ "error": why }));
    // The dashboard's own check, so the two cannot drift.
    let guarded = hopwise_control::dashboard::server::guard(port, &req);
    if let Err(refusal) = guarded {
        return refuse(refusal.status(), refusal.to_string());
    }
    let (parts, body) = req.into_parts();
    let state = |f: &Fault| wire::json(200, &json!(f));
    match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/fault") => state(&knobs.get()),
        (&Method::POST, "/fault/clear") => {
            knobs.set(Fault::default());
            state(&knobs.get())
        }
        (&Method::POST, "/fault") => {
            let bytes = match Limited::new(body, MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return refuse(400, format!("cannot read the body: {e}")),
            };
            match knobs.get().merged(&bytes) {
                Ok(f) => {
                    knobs.set(f);
                    state(&knobs.get())
                }
                Err(e) => refuse(400, e.to_string()),
            }
        }
        (_, "/fault" | "/fault/clear") => refuse(
            405,
            "GET /fault, POST /fault {partial JSON}, POST /fault/clear".to_owned(),
        ),
        (_, path) => refuse(404, format!("no {path} here; the knobs are at /fault")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_contracts_json() {
        assert_eq!(
            serde_json::to_string(&Fault::default()).unwrap_or_default(),
            r#"{"error_rate":0.0,"latency_ms":0,"down":false,"hang":false,"fail_first":0,"lose_response":false}"#
        );
    }

    #[test]
    fn a_partial_object_changes_only_its_fields() {
        let f = Fault::default()
            .merged(br#"{"fail_first": 5, "latency_ms": 20}"#)
            .unwrap_or_default();
        assert_eq!((f.fail_first, f.latency_ms, f.down), (5, 20, false));
        let g = f.merged(br#"{"down": true}"#).unwrap_or_default();
        assert_eq!((g.fail_first, g.latency_ms, g.down), (5, 20, true));
        assert_eq!(f.merged(b"{}"), Ok(f.clone()));
    }

    #[test]
    fn bad_fields_and_values_are_refused_with_the_reason() {
        let f = Fault::default();
        let err = |body: &str| f.merged(body.as_bytes()).err().map(|e| e.to_string());
        assert_eq!(
            err(r#"{"error_rate": 1.5}"#).as_deref(),
            Some("`error_rate`: 1.5 is not a share between 0.0 and 1.0 (20 % is 0.2)")
        );
        assert_eq!(
            err(r#"{"down": "yes"}"#).as_deref(),
            Some("`down`: expected true or false, found \"yes\"")
        );
        assert_eq!(
            err(r#"{"fail_first": -1}"#).as_deref(),
            Some("`fail_first`: expected a whole number, found -1")
        );
        assert_eq!(
            err(r#"{"latency": 5}"#).as_deref(),
            Some(
                "unknown field `latency`; the knobs are error_rate, latency_ms, down, hang, fail_first, lose_response"
            )
        );
        assert!(err("[1]").unwrap_or_default().contains("not a JSON object"));
        assert!(err("{").unwrap_or_default().contains("not a JSON object"));
        assert!(err(r#"{"latency_ms": 600001}"#).is_some());
    }

    #[test]
    fn fail_first_counts_down_then_requests_pass() {
        let k = Knobs::new();
        k.set(Fault {
            fail_first: 2,
            ..Fault::default()
        });
        let fails: Vec<bool> = (0..4).map(|_| k.decide().fail).collect();
        assert_eq!(fails, [true, true, false, false]);
        assert_eq!(k.get().fail_first, 0);
        k.set(Fault {
            error_rate: 1.0,
            ..Fault::default()
        });
        assert!(k.decide().fail);
    }
}
