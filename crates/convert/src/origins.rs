//! From a place in the written hopwise file back to the configuration it came from. Every field
//! the translation wrote keeps its [`At`]; a field left to the mesh's defaults is named by the
//! object that would have held it (the VirtualService route, the DestinationRule, or their
//! absence), so every finding names a file and a line.

use indexmap::IndexMap;
use serde::Serialize;

use crate::ir::Flavor;
use crate::node::At;

/// Where one call's settings live in the input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOrigin {
    /// The line that says the call is made (the calls file, or a metric series).
    pub call: At,
    /// The route object whose policy the call gets, if any.
    pub policy: Option<At>,
    /// The destination rule (or subset) whose caps the call gets, if any.
    pub destination: Option<At>,
    /// The called service, for "no VirtualService for pricing".
    pub callee: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Origins {
    pub flavor: Flavor,
    /// Each written field of the hopwise file, by its dotted path.
    pub fields: IndexMap<String, At>,
    /// Blocks (`retries`) written, named only for a finding about the block itself.
    pub blocks: IndexMap<String, At>,
    /// Each call (or route of a call), by its dotted path.
    pub calls: IndexMap<String, CallOrigin>,
    /// Each service's `entry`, by the service's path.
    pub services: IndexMap<String, At>,
}

const DESTINATION_FIELDS: [&str; 3] = ["limits", "connect_timeout", "outlier"];

impl Origins {
    /// The input place of a hopwise path (`services.a.calls.b.retries.on`), as
    /// `virtualservice/b (b.yaml:14): http[0].retries.retryOn`.
    pub fn place(&self, path: &str) -> String {
        if let Some(at) = self.blocks.get(path) {
            return at.to_string();
        }
        let mut p = path;
        loop {
            if let Some(at) = self.fields.get(p) {
                return at.to_string();
            }
            if let Some(call) = self.calls.get(p) {
                return self.absent(call, path[p.len()..].trim_start_matches('.'));
            }
            if let Some(at) = self.services.get(p) {
                return at.to_string();
            }
            match p.rfind('.') {
                Some(i) => p = &p[..i],
                None => return path.to_owned(),
            }
        }
    }

    /// The input place of a hopwise path, as a value: the written field, else the line that
    /// says the call is made, else the entry's line.
    pub fn at(&self, path: &str) -> Option<&At> {
        let mut p = path;
        loop {
            if let Some(at) = self.fields.get(p) {
                return Some(at);
            }
            if let Some(call) = self.calls.get(p) {
                return Some(&call.call);
            }
            if let Some(at) = self.services.get(p) {
                return Some(at);
            }
            p = &p[..p.rfind('.')?];
        }
    }

    /// A field the input left out: the object that would hold it and whose default applies.
    fn absent(&self, call: &CallOrigin, field: &str) -> String {
        let mesh = match self.flavor {
            Flavor::Istio => "Istio",
            Flavor::Linkerd => "Linkerd",
        };
        let word = self.word(field);
        if field == "app_retries" || field.is_empty() {
            return call.call.to_string();
        }
        let top = field.split('.').next().unwrap_or(field);
        let holder = if DESTINATION_FIELDS.contains(&top) {
            call.destination.as_ref()
        } else {
            call.policy.as_ref()
        };
        if top == "budget" && self.flavor == Flavor::Istio {
            return format!(
                "{}: Istio has no retry budget",
                holder.map_or_else(|| short(&call.call), ToString::to_string)
            );
        }
        match (holder, self.flavor) {
            (Some(at), _) => format!("{at}: {word} not written, so {mesh}'s default"),
            (None, Flavor::Istio) if DESTINATION_FIELDS.contains(&top) => format!(
                "no DestinationRule for {}: {mesh}'s default {word} (call at {})",
                call.callee,
                short(&call.call)
            ),
            (None, Flavor::Istio) => format!(
                "no VirtualService for {}: {mesh}'s default {word} (call at {})",
                call.callee,
                short(&call.call)
            ),
            (None, Flavor::Linkerd) => format!(
                "no ServiceProfile or route for {}: {mesh}'s default {word} (call at {})",
                call.callee,
                short(&call.call)
            ),
        }
    }

    /// A hopwise field in the input's words.
    fn word(&self, field: &str) -> &'static str {
        let top = field.split('.').next().unwrap_or(field);
        match (self.flavor, top, field) {
            (Flavor::Istio, "timeout", _) => "timeout",
            (Flavor::Istio, "per_try_timeout", _) => "retries.perTryTimeout",
            (Flavor::Istio, "retries", "retries.count") => "retries.attempts",
            (Flavor::Istio, "retries", _) => "retries.retryOn",
            (Flavor::Istio, "budget", _) => "retry budget",
            (Flavor::Istio, "limits", _) => "trafficPolicy.connectionPool",
            (Flavor::Istio, "outlier", _) => "trafficPolicy.outlierDetection",
            (Flavor::Istio, "connect_timeout", _) => "connectionPool.tcp.connectTimeout",
            (Flavor::Linkerd, "timeout", _) => "timeout",
            (Flavor::Linkerd, "per_try_timeout", _) => "retry.linkerd.io/timeout",
            (Flavor::Linkerd, "retries", _) => "isRetryable / retry.linkerd.io/http",
            (Flavor::Linkerd, "budget", _) => "retryBudget",
            (Flavor::Linkerd, "limits" | "outlier" | "connect_timeout", _) => {
                "setting (Linkerd has none per service)"
            }
            _ => "setting",
        }
    }
}

fn short(at: &At) -> String {
    format!("{}:{}", at.file, at.pos.line)
}
