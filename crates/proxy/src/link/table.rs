//! The table behind [`super::Links`]: inbound requests in flight by (trace id, span id), and per
//! trace id how many there are, so a call whose span the proxy never saw is matched on its
//! trace alone only when that names one request. Pure (no clock, no I/O).

use std::collections::HashMap;
use std::sync::Arc;

use hopwise_api::trace_context::{SpanId, TraceId};

use super::Served;

/// A request's place in its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    trace: TraceId,
    span: SpanId,
}

impl Key {
    pub(super) fn new(trace: TraceId, span: SpanId) -> Key {
        Key { trace, span }
    }
}

/// The requests in flight of one trace: how many, and their span ids XORed together — with
/// one left, that is its span id, without keeping a list per trace.
#[derive(Debug, Clone, Copy)]
struct Trace {
    count: u32,
    spans: u64,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    by_span: HashMap<Key, Arc<Served>>,
    by_trace: HashMap<TraceId, Trace>,
}

fn bits(s: SpanId) -> u64 {
    u64::from_be_bytes(s.to_bytes())
}

impl Table {
    pub(super) fn len(&self) -> usize {
        self.by_span.len()
    }

    #[cfg(test)]
    pub(super) fn by_trace_is_empty(&self) -> bool {
        self.by_trace.is_empty()
    }

    /// Adds a request unless the table holds `cap` already or the key is taken (a span id
    /// drawn twice in one trace: the second goes unlinked rather than replace the first).
    pub(super) fn insert(&mut self, key: Key, served: Arc<Served>, cap: usize) -> bool {
        if self.by_span.len() >= cap || self.by_span.contains_key(&key) {
            return false;
        }
        self.by_span.insert(key, served);
        let t = self
            .by_trace
            .entry(key.trace)
            .or_insert(Trace { count: 0, spans: 0 });
        t.count += 1;
        t.spans ^= bits(key.span);
        true
    }

    pub(super) fn remove(&mut self, key: Key) {
        if self.by_span.remove(&key).is_none() {
            return;
        }
        if let Some(t) = self.by_trace.get_mut(&key.trace) {
            t.count -= 1;
            t.spans ^= bits(key.span);
            if t.count == 0 {
                self.by_trace.remove(&key.trace);
            }
        }
    }

    /// The request `key` names: by its span, else by its trace when only one is in flight.
    pub(super) fn find(&self, key: Key) -> Option<Arc<Served>> {
        if let Some(s) = self.by_span.get(&key) {
            return Some(s.clone());
        }
        let t = self.by_trace.get(&key.trace)?;
        if t.count != 1 {
            return None;
        }
        let span = SpanId::from_bytes(t.spans.to_be_bytes())?;
        self.by_span
            .get(&Key {
                trace: key.trace,
                span,
            })
            .cloned()
    }
}
