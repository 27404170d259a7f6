//! `RUN/samples.json`: what one `hopwise up` runs and where, for the dashboard (which reads it
//! on each request) and for `hopwise fault`. The type is the dashboard's
//! (`hopwise_control::dashboard::samples`, the reader's); this writes it from a plan. The
//! contract:
//!
//! ```json
//! {"mesh":"/abs/mesh.yaml","services":{"pricing":{"sample":"chain","copies":[
//!   {"copy":0,"app":"127.0.0.1:P","knobs":"127.0.0.1:Q","admin":"127.0.0.1:R","inbound":"127.0.0.1:S"}]}}}
//! ```
//!
//! A user's own service has `"sample": null` and no `knobs`; the fee (outside the mesh) has no
//! `admin` or `inbound`; the gateway `up` runs has only `admin`.

use std::path::Path;

pub use hopwise_control::dashboard::samples::{FILE, SampleCopy, SampleService, SamplesFile};

use super::plan::Plan;

/// What `up` writes for `plan`, run from the mesh file `mesh`, its control plane at `control`.
pub fn from_plan(mesh: &Path, plan: &Plan, control: std::net::SocketAddr) -> SamplesFile {
    let service = |s: &super::plan::Planned| SampleService {
        sample: s.sample.map(|k| k.name().to_owned()),
        copies: s
            .copies
            .iter()
            .map(|c| SampleCopy {
                copy: c.copy,
                app: Some(c.app),
                knobs: c.knobs,
                admin: c.proxy.as_ref().map(|p| p.admin),
                inbound: c.proxy.as_ref().map(|p| p.inbound),
            })
            .collect(),
    };
    // The gateway has no app; its admin port is listed so the dashboard reads its /metrics (the
    // front door's edge into the entry), as it never registers a copy with the control plane.
    let gateway = plan.gateway.iter().map(|g| {
        let copy = SampleCopy {
            copy: 0,
            app: None,
            knobs: None,
            admin: Some(g.admin),
            inbound: None,
        };
        let front = SampleService {
            sample: None,
            copies: vec![copy],
        };
        (g.name.clone(), front)
    });
    SamplesFile {
        mesh: mesh.to_owned(),
        control: Some(control),
        services: plan
            .services
            .iter()
            .map(|s| (s.name.clone(), service(s)))
            .chain(gateway)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_has_the_contracts_shape() {
        let text = r#"{"mesh":"/m.yaml","services":{"a":{"sample":"chain","copies":[{"copy":0,"app":"127.0.0.1:1","knobs":"127.0.0.1:2","admin":"127.0.0.1:3","inbound":"127.0.0.1:4"}]},"u":{"sample":null,"copies":[{"copy":0,"app":"127.0.0.1:5","admin":"127.0.0.1:6","inbound":"127.0.0.1:7"}]}}}"#;
        let f: SamplesFile = serde_json::from_str(text).unwrap();
        assert_eq!(
            f.services["a"].copies[0].knobs,
            Some("127.0.0.1:2".parse().unwrap())
        );
        assert_eq!(f.services["u"].sample, None);
        assert_eq!(serde_json::to_string(&f).unwrap(), text);
    }
}
