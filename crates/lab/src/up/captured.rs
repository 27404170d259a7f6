//! `hopwise up` with its sample apps captured (`mesh.capture.up: true`, or `up --captured`;
//! docs/up.md): every copy of a `chain` or `leaf` sample, and of a service's own command
//! (`run`), runs in a network namespace of its own, made exactly as `hopwise run` makes one
//! ([`CapturedCopy`]: recorded under `--state`, removed when `up` stops, swept by the next `up`
//! or `run` after a crash), and calls its callees by name (`http://inventory/…`) through its
//! proxy's capture listener instead of a local port per callee.
//!
//! [`plan`] is pure: which copies are captured and where the host reaches their apps.
//! [`Namespaces`] holds the namespaces of one run. Who starts what is `run.rs`'s.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use hopwise_model::{Mesh, SampleKind};

use super::plan::{Plan, PlanError, Planned, PlannedCopy};
use crate::capture::{CapturedCopy, Tools};
use crate::error::LabError;

/// `plan` with every copy that has a proxy and an app `up` starts (a `chain` or `leaf` sample,
/// or a `run` command) captured: the host reaches its app at its namespace's address on the
/// port planned (inside, the app listens on its own loopback on that port: [`inside`]); it has
/// no local port per callee. The fee (outside the mesh) and apps `up` does not start are left
/// as they are. A copy the capture range has no room for is an error.
pub fn plan(mut plan: Plan, mesh: &Mesh) -> Result<Plan, PlanError> {
    for s in &mut plan.services {
        if !matches!(s.sample, Some(SampleKind::Chain | SampleKind::Leaf)) && s.run.is_none() {
            continue;
        }
        for c in &mut s.copies {
            let Some(proxy) = &mut c.proxy else { continue };
            let net = mesh
                .copy_net(&s.name, c.copy)
                .ok_or_else(|| PlanError::NoCaptureRoom {
                    service: s.name.clone(),
                    copy: c.copy,
                    range: mesh.capture.range.to_string(),
                })?;
            c.app = SocketAddr::new(IpAddr::V4(net.app), c.app.port());
            c.by_name = proxy.upstreams.drain(..).map(|(to, _)| to).collect();
            c.captured = true;
        }
    }
    Ok(plan)
}

/// Where a captured copy's app listens inside its namespace: its loopback, the planned port.
pub fn inside(app: SocketAddr) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), app.port())
}

/// The namespaces of one run's captured copies; each is removed when this is dropped (after
/// the processes in it are stopped: `run.rs` keeps it behind its supervisor).
#[derive(Debug)]
pub struct Namespaces {
    tools: Tools,
    state: PathBuf,
    made: Vec<((String, usize), CapturedCopy)>,
}

impl Namespaces {
    /// Capture needs root, `ip` and `nft` (or `iptables-restore`): an error naming what is
    /// missing.
    pub fn new(state: &Path) -> Result<Namespaces, LabError> {
        let tools = Tools::find()?;
        if !crate::capture::is_root() {
            return Err(LabError::Failed(
                "captured sample apps run in network namespaces: run `hopwise up` as root, or without capture (no --captured, no mesh.capture.up)".into(),
            ));
        }
        Ok(Namespaces {
            tools,
            state: state.to_owned(),
            made: Vec::new(),
        })
    }

    /// Makes the namespace of copy `copy` of `service`, its app on `app_port` inside.
    pub fn make(
        &mut self,
        mesh: &Mesh,
        service: &str,
        copy: usize,
        app_port: u16,
    ) -> Result<&mut CapturedCopy, LabError> {
        let made = CapturedCopy::make(
            mesh,
            service,
            copy,
            Some(app_port),
            &self.state,
            &self.tools,
        )?;
        crate::progress(&format!(
            "{service} copy {copy}: namespace {} ({})",
            made.plan().names.netns,
            made.plan().net.app
        ));
        self.made.push(((service.to_owned(), copy), made));
        let last = self.made.len() - 1;
        Ok(&mut self.made[last].1)
    }

    /// Makes the namespace of copy `c` if it is captured and its app starts after its proxy
    /// (a `run` command): the proxy's capture listener is bound in it. A sample's is made
    /// with its app, before the proxies start.
    pub fn before_proxy(
        &mut self,
        mesh: &Mesh,
        svc: &Planned,
        c: &PlannedCopy,
    ) -> Result<(), LabError> {
        if c.captured && svc.run.is_some() {
            self.make(mesh, &svc.name, c.copy, c.app.port())?;
        }
        Ok(())
    }

    pub fn get_mut(&mut self, service: &str, copy: usize) -> Option<&mut CapturedCopy> {
        self.made
            .iter_mut()
            .find(|((s, c), _)| s == service && *c == copy)
            .map(|(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> SocketAddr {
        let mut next = 30_000u16;
        move || {
            next += 1;
            SocketAddr::from(([127, 0, 0, 1], next - 1))
        }
    }

    #[test]
    fn the_shops_samples_are_reached_in_their_namespaces_and_call_by_name() {
        let text = include_str!("../../../../examples/shop/mesh.yaml");
        let mesh = Mesh::from_yaml(text).unwrap();
        let open = Plan::new(&mesh, &mut counter()).unwrap();
        let p = plan(open.clone(), &mesh).unwrap();
        for (before, after) in open.services.iter().zip(&p.services) {
            for (b, a) in before.copies.iter().zip(&after.copies) {
                let net = mesh.copy_net(&after.name, a.copy).unwrap();
                assert!(a.captured, "{} {}", after.name, a.copy);
                assert_eq!(a.app, SocketAddr::new(IpAddr::V4(net.app), b.app.port()));
                assert_eq!(
                    inside(a.app),
                    SocketAddr::from(([127, 0, 0, 1], b.app.port()))
                );
                let proxy = a.proxy.as_ref().unwrap();
                assert!(proxy.upstreams.is_empty(), "calls go by name");
                let names: Vec<&String> = b
                    .proxy
                    .as_ref()
                    .unwrap()
                    .upstreams
                    .iter()
                    .map(|(n, _)| n)
                    .collect();
                assert_eq!(a.by_name.iter().collect::<Vec<_>>(), names);
                // The proxy's own ports and the knobs stay on the host's loopback.
                assert_eq!(a.knobs, b.knobs);
                assert_eq!(proxy.inbound, b.proxy.as_ref().unwrap().inbound);
            }
        }
        // pricing's two copies: two namespaces.
        let pricing = p.service("pricing").unwrap();
        assert_ne!(pricing.copies[0].app.ip(), pricing.copies[1].app.ip());
    }

    #[test]
    fn the_fee_and_users_apps_are_not_captured_and_a_full_range_is_an_error() {
        let text = include_str!("../../../../examples/library/mesh.yaml");
        let mesh = Mesh::from_yaml(text).unwrap();
        let p = plan(Plan::new(&mesh, &mut counter()).unwrap(), &mesh).unwrap();
        let fee = p.service("fee").unwrap();
        assert!(!fee.copies[0].captured && fee.copies[0].app.ip().is_loopback());
        let users = "services:\n  a: { copies: [{ app: 127.0.0.1:9000 }], calls: { b: {} } }\n  b: { sample: leaf }\n";
        let mesh = Mesh::from_yaml(users).unwrap();
        let p = plan(Plan::new(&mesh, &mut counter()).unwrap(), &mesh).unwrap();
        assert!(
            !p.services[0].copies[0].captured,
            "a user's app runs where it is"
        );
        assert!(p.services[1].copies[0].captured);
        // A /22 holds the copies of its first two services only (past its first 256
        // addresses, room for 100 copies' /30s per service).
        let tight = "mesh: { capture: { range: 10.9.0.0/22 } }\nservices:\n  a: { sample: leaf }\n  b: { sample: leaf }\n  c: { sample: leaf }\n";
        let mesh = Mesh::from_yaml(tight).unwrap();
        let err = plan(Plan::new(&mesh, &mut counter()).unwrap(), &mesh).unwrap_err();
        assert!(
            matches!(&err, PlanError::NoCaptureRoom { service, .. } if service == "c"),
            "{err}"
        );
    }
}
