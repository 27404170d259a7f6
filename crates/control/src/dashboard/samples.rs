//! The fault knobs of sample apps. `hopwise up` starts the control plane with `--samples FILE`
//! and writes FILE (re-read on every request; absent → no knobs):
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
use std::path::Path;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// The file as `hopwise up` writes it (fields this version does not use are ignored).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SamplesFile {
    #[serde(default)]
    pub mesh: String,
    #[serde(default)]
    pub services: IndexMap<String, SampleService>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SampleService {
    /// The kind of sample app (`inventory`, `fee`, …); `None`: not a sample (no knobs).
    #[serde(default)]
    pub sample: Option<String>,
    #[serde(default)]
    pub copies: Vec<SampleCopy>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SampleCopy {
    pub copy: u32,
    #[serde(default)]
    pub app: Option<String>,
    #[serde(default)]
    pub knobs: Option<String>,
    #[serde(default)]
    pub admin: Option<String>,
    #[serde(default)]
    pub inbound: Option<String>,
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
    pub copy: u32,
    pub knobs: SocketAddr,
}

impl SamplesFile {
    /// The copies with knobs on a loopback address, optionally of one service / one copy.
    pub fn knobs(&self, service: Option<&str>, copy: Option<u32>) -> Vec<Knob> {
        self.services
            .iter()
            .filter(|(name, _)| service.is_none_or(|s| s == name.as_str()))
            .flat_map(|(name, s)| {
                s.copies
                    .iter()
                    .filter(move |c| copy.is_none_or(|n| n == c.copy))
                    .filter_map(move |c| {
                        let knobs: SocketAddr = c.knobs.as_deref()?.trim().parse().ok()?;
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
