//! The dashboard's traces: its OTLP receiver ([`crate::otlp_receiver`]) feeding the bounded
//! store ([`super::traces`]), and the two JSON answers over it — `/api/traces` (the recent
//! traces, newest first, and where the mesh in force sends its spans) and `/api/traces/<id>`
//! (one trace laid out, [`super::waterfall`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use hopwise_model::Mesh;
use serde_json::{Value, json};

use super::traces::{Direction, MAX_SPANS, MAX_TEXT, MAX_TRACES, Store};
use super::waterfall;
use crate::otlp_receiver::{self, Limits, Running, Sink};

/// The store, shared by the receiver's tasks and the page's requests, and the clock it is
/// told the time by (ms since the store was made).
#[derive(Debug, Clone)]
pub struct Shared {
    store: Arc<Mutex<Store>>,
    epoch: Instant,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            store: Arc::default(),
            epoch: Instant::now(),
        }
    }
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        // Plain data: a panic elsewhere leaves it usable.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, on the store's clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// What the receiver does with an export: decoded, then kept.
    pub fn sink(&self) -> Sink {
        let store = self.clone();
        Arc::new(move |export| {
            let spans = otlp_receiver::spans_of(export);
            let now = store.now_ms();
            store.lock().add(&spans, now);
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
            let now = t.store.now_ms();
            let s = t.store.lock();
            (s.recent(now), s.dropped_spans, s.refused_spans)
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

/// `/api/traces/<id>`: `None` when the store does not hold it. `copies` names the copies the
/// dashboard knows by their inbound address, for a try the called side sent no span of.
pub fn one(traces: Option<&Traces>, id: &str, copies: &HashMap<String, String>) -> Option<Value> {
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
    name_copies(&mut w.rows, copies);
    let mut v = serde_json::to_value(&w).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.insert("id".into(), json!(id));
        o.insert("dropped_spans".into(), json!(trace.dropped));
    }
    Some(v)
}

/// A try's copy by name, as `hopwise tap` and the called side's spans name it (`pricing[1]`):
/// the instance of the inbound span under it, else the dashboard's name for its address; the
/// address stays beside it (`copy_address`).
fn name_copies(rows: &mut [waterfall::Row], copies: &HashMap<String, String>) {
    for i in 0..rows.len() {
        if rows[i].span.direction != Direction::Try {
            continue;
        }
        let id = rows[i].span.span_id;
        let called = rows
            .iter()
            .find(|r| r.span.parent == Some(id) && r.span.direction == Direction::Inbound)
            .and_then(|r| r.span.instance.clone());
        let s = &mut rows[i].span;
        let known = s.copy.as_ref().and_then(|a| copies.get(a)).cloned();
        if let Some(name) = called.or(known) {
            s.copy_address = s.copy.replace(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::waterfall::tests::span;
    use Direction::{Inbound, Outbound, Try};

    #[test]
    fn a_try_names_its_copy_by_the_called_sides_span_else_by_its_address() {
        let mut spans = vec![
            span(1, 0, "a", Outbound, 0, 100),
            span(2, 1, "a", Try, 1, 40),
            span(3, 2, "b", Inbound, 2, 39),
            span(4, 1, "a", Try, 41, 90),
            span(5, 1, "a", Try, 91, 99),
        ];
        spans[2].instance = Some("b[1]".into());
        for (i, addr) in [
            (1, "127.0.0.1:7001"),
            (3, "127.0.0.1:7000"),
            (4, "127.0.0.1:7009"),
        ] {
            spans[i].copy = Some(addr.into());
        }
        let mut w = waterfall::layout(&spans);
        let known = HashMap::from([("127.0.0.1:7000".to_owned(), "b-0".to_owned())]);
        name_copies(&mut w.rows, &known);
        let copy = |id: u64| {
            let s = &w.rows.iter().find(|r| r.span.span_id == id).unwrap().span;
            (s.copy.as_deref(), s.copy_address.as_deref())
        };
        assert_eq!(
            copy(2),
            (Some("b[1]"), Some("127.0.0.1:7001")),
            "its span says"
        );
        assert_eq!(
            copy(4),
            (Some("b-0"), Some("127.0.0.1:7000")),
            "the registry says"
        );
        assert_eq!(copy(5), (Some("127.0.0.1:7009"), None), "nobody says");
    }

    #[test]
    fn a_collector_names_the_receiver_by_address_or_localhost() {
        let r: SocketAddr = "127.0.0.1:4317".parse().unwrap_or_else(|_| unreachable!());
        assert!(names("127.0.0.1:4317", r));
        assert!(names("localhost:4317", r));
        assert!(!names("127.0.0.1:4318", r));
        assert!(!names("otel.example:4317", r));
    }
}
