//! The fault knobs of sample apps, and the one type of the `samples.json` file that names them.
//! `hopwise up` starts the control plane with `--samples FILE` and writes FILE with this type
//! (re-read on every request; absent → no knobs):
//!
//! ```json
//! {"mesh":"/abs/mesh.yaml","services":{"inventory":{"sample":"inventory","copies":[
//!   {"copy":0,"app":"127.0.0.1:P","knobs":"127.0.0.1:Q","admin":"127.0.0.1:R","inbound":"127.0.0.1:S"}]}}}
//! ```
//!
//! Each copy serves `GET http://KNOBS/fault` (its state), `POST /fault` with a partial JSON
//! object (the merged state back; 400 on bad input) and `POST /fault/clear`. The dashboard
//! relays these, to loopback addresses only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};

/// The file's name in `up`'s run directory.
pub const FILE: &str = "samples.json";

/// The file: `hopwise up` writes it, the dashboard and `hopwise fault` read it. Reading is
/// lenient (fields this version does not know are ignored, missing ones are empty, an address
/// that does not parse is absent), so a newer or older `up` never breaks the page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplesFile {
    /// The mesh file `up` runs (absolute).
    #[serde(default)]
    pub mesh: PathBuf,
    #[serde(default)]
    pub services: IndexMap<String, SampleService>,
    /// Where the run's control plane listens (`hopwise fault` applies a mesh fault there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<std::net::SocketAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleService {
    /// The kind of sample app (`chain`, `leaf`, `fee`); `None` (`null`): the user's own app,
    /// without knobs.
    #[serde(default)]
    pub sample: Option<String>,
    #[serde(default)]
    pub copies: Vec<SampleCopy>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleCopy {
    /// The copy's index under `copies` in the mesh file.
    pub copy: usize,
    #[serde(
        default,
        deserialize_with = "lenient_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub app: Option<SocketAddr>,
    /// The sample's fault knobs; absent for a user's app.
    #[serde(
        default,
        deserialize_with = "lenient_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub knobs: Option<SocketAddr>,
    /// The sidecar's admin endpoint; absent for a service outside the mesh (the fee).
    #[serde(
        default,
        deserialize_with = "lenient_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub admin: Option<SocketAddr>,
    #[serde(
        default,
        deserialize_with = "lenient_addr",
        skip_serializing_if = "Option::is_none"
    )]
    pub inbound: Option<SocketAddr>,
}

/// An address written as a string; anything else (or a string that is not an address) is
/// absent rather than an error.
fn lenient_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value
        .as_ref()
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.trim().parse().ok()))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SamplesError {
    #[error("cannot read {0}: {1}")]
    Read(String, String),
    #[error("{0} is not a samples file: {1}")]
    Format(String, String),
}

/// Reads the file; `Ok(None)` when it does not exist (yet).
pub fn read(path: &Path) -> Result<Option<SamplesFile>, SamplesError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SamplesError::Format(path.display().to_string(), e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SamplesError::Read(
            path.display().to_string(),
            e.to_string(),
        )),
    }
}

/// A copy whose knobs the dashboard may reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Knob {
    pub service: String,
    pub sample: Option<String>,
    pub copy: usize,
    pub knobs: SocketAddr,
}

impl SamplesFile {
    /// The copies with knobs on a loopback address, optionally of one service / one copy.
    pub fn knobs(&self, service: Option<&str>, copy: Option<usize>) -> Vec<Knob> {
        self.services
            .iter()
            .filter(|(name, _)| service.is_none_or(|s| s == name.as_str()))
            .flat_map(|(name, s)| {
                s.copies
                    .iter()
                    .filter(move |c| copy.is_none_or(|n| n == c.copy))
                    .filter_map(move |c| {
                        let knobs = c.knobs?;
                        knobs.ip().is_loopback().then(|| Knob {
                            service: name.clone(),
                            sample: s.sample.clone(),
                            copy: c.copy,
                            knobs,
                        })
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_contract_and_keeps_loopback_knobs_only() {
        let text = r#"{"mesh":"/m.yaml","services":{
            "inventory":{"sample":"inventory","copies":[
                {"copy":0,"app":"127.0.0.1:1","knobs":"127.0.0.1:2","admin":"127.0.0.1:3","inbound":"127.0.0.1:4"},
                {"copy":1,"knobs":"10.0.0.1:2"}]},
            "frontend":{"sample":null,"copies":[{"copy":0,"app":"127.0.0.1:5","future":"field"}]}}}"#;
        let f: SamplesFile = serde_json::from_str(text).unwrap();
        let all = f.knobs(None, None);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].knobs, "127.0.0.1:2".parse().unwrap());
        assert_eq!(f.knobs(Some("inventory"), Some(1)), []);
        assert_eq!(f.knobs(Some("frontend"), None), []);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(&dir.path().join("absent.json")), Ok(None));
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        assert!(matches!(
            read(&dir.path().join("bad.json")),
            Err(SamplesError::Format(..))
        ));
    }
}
