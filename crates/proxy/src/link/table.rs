//! The table behind [`super::Links`]: inbound requests in flight by (trace id, span id), and per
//! trace id how many there are, so a call whose span the proxy never saw is matched on its
//! trace alone only when that names one request. Pure (no clock, no I/O).
//!
//! Hashing. Every traced inbound request inserts and removes one entry of each map, and SipHash
//! was most of what the link cost. Both maps hash with a wide multiply by a secret random odd
//! factor ([`Seeded`], as foldhash and ahash do), a few instructions a word. `by_span` hashes a
//! key's span bits alone: the proxy's own random id. Trace ids are the caller's; not knowing the
//! factor, it cannot aim them at one bucket, and the table holds at most `cap` entries anyway.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;

use hopwise_api::trace_context::{SpanId, TraceId};

use super::Served;

/// A request's place in its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    trace: TraceId,
    span: SpanId,
}

impl Key {
    pub(super) fn new(trace: TraceId, span: SpanId) -> Key {
        Key { trace, span }
    }
}

/// Only the span's bits (keys equal in full are equal in these): see the module's hashing.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(bits(self.span));
    }
}

/// The tables' hash: each word mixed in by a wide multiply by a secret factor, folded.
#[derive(Debug, Clone, Copy)]
struct Seeded {
    seed: u64,
    factor: u64,
}

impl Default for Seeded {
    fn default() -> Seeded {
        // The standard library's per-process random keys, drawn through its own hash.
        let random = RandomState::new();
        Seeded {
            seed: random.hash_one(0u64),
            factor: random.hash_one(1u64) | 1,
        }
    }
}

impl BuildHasher for Seeded {
    type Hasher = SeededHasher;
    fn build_hasher(&self) -> SeededHasher {
        SeededHasher {
            h: self.seed,
            factor: self.factor,
        }
    }
}

#[derive(Debug)]
struct SeededHasher {
    h: u64,
    factor: u64,
}

impl Hasher for SeededHasher {
    fn write_u64(&mut self, n: u64) {
        let p = u128::from(n ^ self.h) * u128::from(self.factor);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write(&mut self, bytes: &[u8]) {
        // A trace id: two words.
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn finish(&self) -> u64 {
        self.h
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
    by_span: HashMap<Key, Arc<Served>, Seeded>,
    by_trace: HashMap<TraceId, Trace, Seeded>,
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
        if self.by_span.len() >= cap {
            return false;
        }
        match self.by_span.entry(key) {
            Entry::Occupied(_) => return false,
            Entry::Vacant(v) => v.insert(served),
        };
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
        if let Entry::Occupied(mut e) = self.by_trace.entry(key.trace) {
            let t = e.get_mut();
            t.count -= 1;
            t.spans ^= bits(key.span);
            if t.count == 0 {
                e.remove();
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
