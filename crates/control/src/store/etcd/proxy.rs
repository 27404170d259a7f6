//! `<prefix>/proxies/<service>/<proxy>/<lease>`: what one replica knows of one proxy — its
//! presence (a `Subscribe` stream open on that replica) and its last acknowledgement — so that
//! every replica's `Status` and CA rotation see every proxy of the mesh. Pure.
//!
//! Each replica writes only its own keys, attached to an etcd lease of its own (`<lease>` in the
//! key), so two replicas never overwrite each other's word about a proxy moving between them, and
//! a replica that dies takes its keys with it when its lease expires.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// A proxy's last acknowledgement, as one replica received it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckValue {
    pub version: u64,
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Milliseconds since the Unix epoch when the replica received it.
    pub at_unix_ms: i64,
}

/// What one replica knows of one proxy (or, merged, what the replicas know together).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyValue {
    /// The replica that wrote it: its listen address. Merged: the replicas where a stream of
    /// this proxy is open, comma-separated.
    pub replica: String,
    /// A `Subscribe` stream of this proxy is open on that replica.
    pub connected: bool,
    /// The last snapshot version that replica sent it (0: none).
    #[serde(default)]
    pub last_sent: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<AckValue>,
    /// When its last issued certificate expires (seconds since the Unix epoch), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_not_after_unix: Option<i64>,
    /// The CA generation of the last certificate issued to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_issued: Option<u64>,
    /// The CA generation of the certificate it says it presents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_in_force: Option<u64>,
    /// The highest version it acknowledged with the snapshot's trust bundle in force.
    #[serde(default)]
    pub bundle_confirmed: u64,
    /// Its admin endpoint, for the dashboard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<SocketAddr>,
}

impl ProxyValue {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Option<ProxyValue> {
        serde_json::from_slice(bytes).ok()
    }
}

/// A name as one key segment: `%` and `/` escaped (a proxy names itself, and may use either),
/// and the empty name (a proxy that gave none) as a lone `%`, which no escaped name can be.
pub fn escape(name: &str) -> String {
    if name.is_empty() {
        return "%".to_owned();
    }
    name.replace('%', "%25").replace('/', "%2F")
}

/// The name of a key segment written by [`escape`]; `None` for one it cannot have written.
pub fn unescape(segment: &str) -> Option<String> {
    if segment == "%" {
        return Some(String::new());
    }
    if segment.is_empty() || segment.contains('/') {
        return None;
    }
    let mut out = String::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}
