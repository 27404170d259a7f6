//! The dashboard's traces: its OTLP receiver ([`crate::otlp_receiver`]) feeding the bounded
//! store ([`super::traces`]), and the two JSON answers over it — `/api/traces` (the recent
//! traces, newest first, and where the mesh in force sends its spans) and `/api/traces/<id>`
//! (one trace laid out, [`super::waterfall`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use hopwise_model::Mesh;
use serde_json::{Value, json};

use super::traces::{MAX_SPANS, MAX_TEXT, MAX_TRACES, Store};
use super::waterfall;
use crate::otlp_receiver::{self, Limits, Running, Sink};

/// The store, shared by the receiver's tasks and the page's requests.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<Mutex<Store>>);

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        // Plain data: a panic elsewhere leaves it usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the receiver does with an export: decoded, then kept.
    pub fn sink(&self) -> Sink {
        let store = self.clone();
        Arc::new(move |export| {
            let spans = otlp_receiver::spans_of(export);
            store.lock().add(&spans);
        })
    }
}

/// The receiver and its store.
#[derive(Debug)]
pub struct Traces {
    pub store: Shared,
    pub receiver: Running,
}

/// Starts the receiver on `listener`, keeping what it is sent.
pub fn start(listener: tokio::net::TcpListener, limits: Limits) -> std::io::Result<Traces> {
    let store = Shared::default();
    let receiver = otlp_receiver::spawn(listener, limits, store.sink())?;
    Ok(Traces { store, receiver })
}

/// Does `collector` (a mesh file's `host:port`) name `receiver`?
fn names(collector: &str, receiver: SocketAddr) -> bool {
    if let Ok(a) = collector.parse::<SocketAddr>() {
        return a == receiver || (a.port() == receiver.port() && a.ip().is_unspecified());
    }
    let (host, port) = collector.rsplit_once(':').unwrap_or((collector, ""));
    host == "localhost" && receiver.ip().is_loopback() && port == receiver.port().to_string()
}

/// Where the mesh in force sends spans, for the page to say.
pub fn destination(mesh: &Mesh, receiver: Option<SocketAddr>) -> Value {
    let Some(t) = &mesh.observe.tracing else {
        return json!({ "state": "off" });
    };
    let (state, collector) = match (&t.collector, receiver) {
        (None, _) => ("not-exported", None),
        (Some(c), Some(r)) if names(c, r) => ("here", Some(c)),
        (Some(c), _) => ("elsewhere", Some(c)),
    };
    json!({ "state": state, "collector": collector, "ratio": t.ratio })
}

/// `/api/traces`.
pub fn list(traces: Option<&Traces>, mesh: &Mesh) -> Value {
    let receiver = traces.map(|t| t.receiver.addr);
    let (recent, dropped, refused) = match traces {
        Some(t) => {
            let s = t.store.lock();
            (s.recent(), s.dropped_spans, s.refused_spans)
        }
        None => (Vec::new(), 0, 0),
    };
    json!({
        "receiver": receiver.map(|r| r.to_string()),
        "tracing": destination(mesh, receiver),
        "max_traces": MAX_TRACES,
        "max_spans": MAX_SPANS,
        "max_text": MAX_TEXT,
        "dropped_spans": dropped,
        "refused_spans": refused,
        "traces": recent,
    })
}

/// `/api/traces/<id>`: `None` when the store does not hold it.
pub fn one(traces: Option<&Traces>, id: &str) -> Option<Value> {
    let store = traces?.store.lock();
    let trace = store.get(id)?;
    let mut w = waterfall::layout(&trace.spans);
    // A try is its request's: its route and upstream too.
    for i in 0..w.rows.len() {
        let parent = w.rows[i].span.parent;
        if w.rows[i].span.route.is_none()
            && let Some(p) = w.rows[..i]
                .iter()
                .rev()
                .find(|r| Some(r.span.span_id) == parent)
        {
            let (route, upstream) = (p.span.route.clone(), p.span.upstream.clone());
            let s = &mut w.rows[i].span;
            s.route = route;
            s.upstream = s.upstream.take().or(upstream);
        }
    }
    let mut v = serde_json::to_value(&w).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.insert("id".into(), json!(id));
        o.insert("dropped_spans".into(), json!(trace.dropped));
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_names_the_receiver_by_address_or_localhost() {
        let r: SocketAddr = "127.0.0.1:4317".parse().unwrap_or_else(|_| unreachable!());
        assert!(names("127.0.0.1:4317", r));
        assert!(names("localhost:4317", r));
        assert!(!names("127.0.0.1:4318", r));
        assert!(!names("otel.example:4317", r));
    }
}
