//! The store that replicas share: `--store etcd://HOST:PORT[,HOST:PORT…][/PREFIX]`.
//!
//! What the embedded store keeps in `state.json` lives here as keys under one prefix (default
//! `/hopwise`), and so does the registry of copies, whose keys are attached to etcd leases:
//!
//! ```text
//! <prefix>/secret/ca               the CA (certificate and PRIVATE KEY), its generation, a rotation
//! <prefix>/secret/tokens/<service> the service's join token
//! <prefix>/secret/admin-token      the admin token (apply, rotate-ca, status)
//! <prefix>/mesh                    the mesh file in force, its version, source and time
//! <prefix>/copies/<service>/<lease> a copy: {"addr","healthy","ttl_ms"}, attached to etcd lease <lease>
//! <prefix>/proxies/<service>/<proxy>/<lease>
//!                                  what the replica holding etcd lease <lease> knows of a proxy:
//!                                  its stream there, its last acknowledgement ([`proxy`])
//! ```
//!
//! Everything secret is under `<prefix>/secret/`, so one etcd role can guard it, and every value
//! there is sealed with the replicas' store key ([`seal`]): etcd never holds the CA's key or a
//! token as it is. The view holds the opened values; a write is sealed on its way out
//! ([`View::stored`]). Other values are JSON.
//!
//! Each replica keeps a [`View`] — the state as of the last revision it saw — fed by one watch
//! on the prefix. Writes of the state are transactions that compare each changed key's
//! modification revision with the one the view holds, so two replicas changing the same thing
//! at once cannot overwrite each other: one gets
//! [`StoreError::Conflict`](super::StoreError::Conflict) and nothing changes.
//!
//! The view and the key layout are pure (tested without etcd) and in every build; [`EtcdStore`]
//! is the thin I/O edge ([`client`]), only in a build with the `etcd` feature (its client needs
//! `protoc` to build). Without it, `--store etcd://…` is refused at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CaState, MeshState, Rotation, Secret, State};

pub mod access;
pub mod proxy;
pub mod seal;
pub use access::Access;
pub use proxy::{AckValue, ProxyValue};
pub use seal::Keys;
pub use view::{Change, Effect, View};

mod view;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "/hopwise";

/// Where the shared store is: `etcd://127.0.0.1:2379,10.0.0.2:2379/hopwise`, or `etcds://…`
/// for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSpec {
    /// `host:port` of each etcd member.
    pub endpoints: Vec<String>,
    /// The key prefix, without a trailing `/` (e.g. `/hopwise`).
    pub prefix: String,
    /// `etcds://`: TLS to every member.
    pub tls: bool,
}

impl EtcdSpec {
    /// Reads `etcd[s]://HOST:PORT[,HOST:PORT…][/PREFIX]`. The error names what is wrong.
    pub fn parse(text: &str) -> Result<EtcdSpec, String> {
        let (tls, rest) = match (text.strip_prefix("etcds://"), text.strip_prefix("etcd://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => {
                return Err(format!(
                    "`{text}` is not an etcd address: write etcd://HOST:PORT[,HOST:PORT…][/PREFIX] (etcds:// for TLS)"
                ));
            }
        };
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, DEFAULT_PREFIX),
        };
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX
        } else {
            prefix
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            let port_ok = host
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !port_ok {
                return Err(format!(
                    "`{text}`: `{host}` is not HOST:PORT (e.g. 127.0.0.1:2379)"
                ));
            }
            endpoints.push(host.to_owned());
        }
        Ok(EtcdSpec {
            endpoints,
            prefix: prefix.to_owned(),
            tls,
        })
    }

    /// As written on the command line.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        format!("{scheme}://{}{}", self.endpoints.join(","), self.prefix)
    }

    pub fn layout(&self) -> Layout {
        Layout {
            prefix: self.prefix.clone(),
        }
    }
}

/// The key layout under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    prefix: String,
}

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Ca,
    Mesh,
    Token(String),
    AdminToken,
    Copy {
        service: String,
        lease: u64,
    },
    /// What the replica holding `lease` knows of a proxy (see [`proxy`]).
    Proxy {
        service: String,
        proxy: String,
        lease: u64,
    },
}

impl Layout {
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// Every key of the store starts with this (`<prefix>/`).
    pub fn root(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// Whether `key` is under `<prefix>/secret/`, where every value is sealed.
    pub fn is_secret(&self, key: &str) -> bool {
        key.strip_prefix(&self.root())
            .is_some_and(|rest| rest.starts_with("secret/"))
    }

    pub fn key(&self, key: &Key) -> String {
        let p = &self.prefix;
        match key {
            Key::Ca => format!("{p}/secret/ca"),
            Key::Mesh => format!("{p}/mesh"),
            Key::Token(service) => format!("{p}/secret/tokens/{service}"),
            Key::AdminToken => format!("{p}/secret/admin-token"),
            // Lease ids in hex, fixed width, as etcdctl shows them.
            Key::Copy { service, lease } => format!("{p}/copies/{service}/{lease:016x}"),
            Key::Proxy {
                service,
                proxy,
                lease,
            } => format!(
                "{p}/proxies/{service}/{}/{lease:016x}",
                proxy::escape(proxy)
            ),
        }
    }

    /// What `key` names; `None` for a key this build does not use (left alone).
    pub fn parse(&self, key: &str) -> Option<Key> {
        let rest = key.strip_prefix(&self.root())?;
        if rest == "secret/ca" {
            return Some(Key::Ca);
        }
        if rest == "mesh" {
            return Some(Key::Mesh);
        }
        if rest == "secret/admin-token" {
            return Some(Key::AdminToken);
        }
        if let Some(service) = rest.strip_prefix("secret/tokens/") {
            return (!service.is_empty() && !service.contains('/'))
                .then(|| Key::Token(service.to_owned()));
        }
        if let Some(rest) = rest.strip_prefix("proxies/") {
            let mut parts = rest.split('/');
            let (service, proxy, lease) = (parts.next()?, parts.next()?, parts.next()?);
            if service.is_empty() || parts.next().is_some() {
                return None;
            }
            return Some(Key::Proxy {
                service: service.to_owned(),
                proxy: proxy::unescape(proxy)?,
                lease: lease_id(lease)?,
            });
        }
        let (service, lease) = rest.strip_prefix("copies/")?.split_once('/')?;
        if service.is_empty() {
            return None;
        }
        Some(Key::Copy {
            service: service.to_owned(),
            lease: lease_id(lease)?,
        })
    }
}

/// A lease id as keys write it: 16 lower-case hex digits. Only that: `from_str_radix` also
/// takes capitals and a `+`, which would name one lease by several keys, each seen apart.
fn lease_id(text: &str) -> Option<u64> {
    let digits = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if text.len() != 16 || !digits {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// `<prefix>/secret/ca`: the CA and where a rotation stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CaDoc {
    ca: CaState,
    ca_generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rotation: Option<Rotation>,
}

/// `<prefix>/copies/<service>/<lease>`: one registered copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyValue {
    /// Where other proxies reach it.
    pub addr: SocketAddr,
    pub healthy: bool,
    /// The lease's TTL as granted by etcd.
    pub ttl_ms: u64,
    /// Its proxy's admin endpoint, for the dashboards of every replica (absent in records
    /// written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<SocketAddr>,
    /// The labels it registered with (absent: none, or a record written before labels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: hopwise_model::labels::Labels,
}

impl CopyValue {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Option<CopyValue> {
        serde_json::from_slice(bytes).ok()
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// The persisted state as keys and values. `format` and `starts` are the embedded store's own
/// (versions come from etcd's revision), so they are not written.
pub fn encode_state(layout: &Layout, state: &State) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if let Some(ca) = &state.ca {
        let doc = CaDoc {
            ca: ca.clone(),
            ca_generation: state.ca_generation,
            rotation: state.rotation.clone(),
        };
        out.insert(
            layout.key(&Key::Ca),
            serde_json::to_vec_pretty(&doc).unwrap_or_default(),
        );
    }
    if let Some(mesh) = &state.mesh {
        out.insert(
            layout.key(&Key::Mesh),
            serde_json::to_vec_pretty(mesh).unwrap_or_default(),
        );
    }
    for (service, token) in &state.tokens {
        out.insert(
            layout.key(&Key::Token(service.clone())),
            token.0.clone().into_bytes(),
        );
    }
    if let Some(token) = &state.admin_token {
        out.insert(layout.key(&Key::AdminToken), token.0.clone().into_bytes());
    }
    out
}

/// The state from its keys (other keys are ignored). The error names the key at fault.
pub fn decode_state(
    layout: &Layout,
    kvs: &BTreeMap<String, Vec<u8>>,
) -> Result<State, (String, String)> {
    let mut state = State::default();
    for (key, value) in kvs {
        let bad = |reason: String| (key.clone(), reason);
        match layout.parse(key) {
            Some(Key::Ca) => {
                let doc: CaDoc = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
                state.ca = Some(doc.ca);
                state.ca_generation = doc.ca_generation;
                state.rotation = doc.rotation;
            }
            Some(Key::Mesh) => {
                let mesh: MeshState =
                    serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
                state.mesh = Some(mesh);
            }
            Some(Key::Token(service)) => {
                let token = std::str::from_utf8(value)
                    .map_err(|e| bad(e.to_string()))?
                    .trim()
                    .to_owned();
                state.tokens.insert(service, Secret(token));
            }
            Some(Key::AdminToken) => {
                let token = std::str::from_utf8(value).map_err(|e| bad(e.to_string()))?;
                state.admin_token = Some(Secret(token.trim().to_owned()));
            }
            Some(Key::Copy { .. } | Key::Proxy { .. }) | None => {}
        }
    }
    Ok(state)
}

/// One write of a transaction: the key, its new value (`None`: delete), and the modification
/// revision it must still have (0: it must not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub key: String,
    pub value: Option<Vec<u8>>,
    pub expect: i64,
}

/// The writes that turn `old` into `new`, each guarded by the revision the view saw.
pub fn plan(
    old: &BTreeMap<String, Vec<u8>>,
    new: &BTreeMap<String, Vec<u8>>,
    revs: &BTreeMap<String, i64>,
) -> Vec<Write> {
    let expect = |k: &str| revs.get(k).copied().unwrap_or(0);
    let mut out = Vec::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.push(Write {
                key: k.clone(),
                value: Some(v.clone()),
                expect: expect(k),
            });
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.push(Write {
                key: k.clone(),
                value: None,
                expect: expect(k),
            });
        }
    }
    out
}

// The etcd I/O: with the `etcd` feature, the client; without it, a stand-in with the same
// signatures that cannot be constructed, so `--store etcd://…` is refused at once and the code
// that holds a store needs no `#[cfg]`.
#[cfg(feature = "etcd")]
pub mod client;
#[cfg(not(feature = "etcd"))]
#[path = "etcd/no_client.rs"]
pub mod client;

pub use client::EtcdStore;

#[cfg(test)]
mod tests;
