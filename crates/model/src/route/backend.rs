//! Where a rule sends what it takes: weighted backends, each a service or a label subset of
//! its copies (`version: v2`), and the pick among them. A backend is chosen in proportion to
//! its weight (HTTPBackendRef's `weight`, 1 unless given); weight 0 takes nothing; a rule whose
//! weights are all 0, or that has no backend, has nowhere to send a request ([`Pick::NoBackend`]:
//! the proxy answers 500, as the spec says).
//!
//! Pure: the random draw is the caller's, so a pick is a value a table test can state. Not the
//! choice of a copy within the backend (that is the proxy's balancer).

use std::collections::BTreeMap;

use super::Rule;

/// One backendRef: a target and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub target: Target,
    /// The share of requests, relative to the rule's other backends (at most
    /// [`Backend::MAX_WEIGHT`], `check`).
    pub weight: u32,
}

impl Backend {
    /// The Gateway API's bound on a weight.
    pub const MAX_WEIGHT: u32 = 1_000_000;

    /// All copies of `service`, weight 1 (the spec's default).
    pub fn service(service: &str) -> Self {
        Self {
            target: Target {
                service: service.to_owned(),
                subset: BTreeMap::new(),
            },
            weight: 1,
        }
    }

    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
}

/// A service of the mesh, or those of its copies that carry every label of `subset`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub service: String,
    /// Labels a copy must carry; empty: every copy.
    pub subset: BTreeMap<String, String>,
}

/// The outcome of a pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick<'r> {
    Backend(&'r Backend),
    /// No backend has weight: answer 500.
    NoBackend,
}

/// The backend of `rule` that `draw` falls on: the draw is taken modulo the sum of the weights
/// and walked through the backends in order, so draws `0..sum` give each backend exactly its
/// weight. (Modulo a sum of at most 16 × 1,000,000 a uniform `u32` draw is biased by under
/// 0.4 %.)
pub fn pick_backend<M>(rule: &Rule<M>, draw: u32) -> Pick<'_> {
    let total: u64 = rule.backends.iter().map(|b| u64::from(b.weight)).sum();
    if total == 0 {
        return Pick::NoBackend;
    }
    let mut at = u64::from(draw) % total;
    for b in &rule.backends {
        let w = u64::from(b.weight);
        if at < w {
            return Pick::Backend(b);
        }
        at -= w;
    }
    unreachable!("a draw below the sum of the weights falls on one of them")
}
