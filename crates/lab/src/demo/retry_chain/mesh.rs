//! The mesh files of the retry-chain demo: one per row and set of defaults (frontend, then
//! checkout and pricing as relay copies, inventory external) on the ports of one chain, and the
//! timeout trap's (pricing's proxy alone); written beside their certificates.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hopwise_analyze::Failure;
use hopwise_model::Mesh;

use super::Defaults;
use super::rows::Spec;
use crate::error::{LabError, io};
use crate::processes::ports::{Held, hold};
use crate::samples::inventory::InventoryFails;

/// The listeners of one chain.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ports {
    pub(super) frontend_checkout: SocketAddr,
    pub(super) frontend_admin: SocketAddr,
    pub(super) checkout_inbound: SocketAddr,
    pub(super) checkout_relay: SocketAddr,
    pub(super) checkout_admin: SocketAddr,
    pub(super) pricing_inbound: SocketAddr,
    pub(super) pricing_relay: SocketAddr,
    pub(super) pricing_admin: SocketAddr,
}

impl Ports {
    /// Eight ports, held for as long as the second value lives.
    pub(super) fn free() -> Result<(Ports, Held), LabError> {
        let held = hold(8)?;
        let p = held.addrs();
        let at = |i: usize| {
            p.get(i)
                .copied()
                .ok_or_else(|| LabError::Failed("not enough free ports".into()))
        };
        Ok((
            Ports {
                frontend_checkout: at(0)?,
                frontend_admin: at(1)?,
                checkout_inbound: at(2)?,
                checkout_relay: at(3)?,
                checkout_admin: at(4)?,
                pricing_inbound: at(5)?,
                pricing_relay: at(6)?,
                pricing_admin: at(7)?,
            },
            held,
        ))
    }
}

/// The mesh file of one row under one set of defaults.
pub(super) fn chain_mesh(
    spec: &Spec,
    defaults: Defaults,
    p: &Ports,
    inventory: SocketAddr,
) -> String {
    let protocol = if spec.grpc { "grpc" } else { "http" };
    let defaults_block = match (defaults, spec.retriable_503) {
        (Defaults::Istio, false) => "defaults: { preset: istio }\n".to_owned(),
        (Defaults::Istio, true) => {
            "defaults: { preset: istio, retries: { status_codes: [503] } }\n".to_owned()
        }
        // hopwise's defaults are the built-in preset: nothing to write.
        (Defaults::Hopwise, false) => String::new(),
        // Lists replace the inherited list: hopwise's three conditions, plus the status codes.
        (Defaults::Hopwise, true) => "defaults:\n  retries:\n    on: [connect-failure, \
             refused-stream, reset-before-request, retriable-status-codes]\n    status_codes: \
             [503]\n"
            .to_owned(),
    };
    let frontend_call = if spec.app_retries > 0 {
        format!("{{ app_retries: {} }}", spec.app_retries)
    } else {
        "{}".to_owned()
    };
    format!(
        "# hopwise demo retry-chain: inventory {label}; {defaults} defaults
mesh: {{ name: retry-chain, trust_domain: demo.local, certs: certs }}
{defaults_block}services:
  frontend:
    entry: {{}}
    calls:
      checkout: {frontend_call}
    copies:
      - {{ upstreams: {{ checkout: \"{fc}\" }}, admin: \"{fa}\" }}
  checkout:
    protocol: {protocol}
    calls: {{ pricing: {{}} }}
    copies:
      # a relay: its inbound side feeds its own outbound side
      - {{ inbound: \"{ci}\", app: \"{cr_app}\", upstreams: {{ pricing: \"{cr}\" }}, admin: \"{ca}\" }}
  pricing:
    protocol: {protocol}
    calls: {{ inventory: {{}} }}
    copies:
      # a relay too
      - {{ inbound: \"{pi}\", app: \"{pr_app}\", upstreams: {{ inventory: \"{pr}\" }}, admin: \"{pa}\" }}
  inventory:
    protocol: {protocol}
    external: {{ address: \"{inventory}\" }}
",
        label = spec.label,
        defaults = defaults.name(),
        fc = p.frontend_checkout,
        fa = p.frontend_admin,
        ci = p.checkout_inbound,
        cr_app = p.checkout_relay,
        cr = p.checkout_relay,
        ca = p.checkout_admin,
        pi = p.pricing_inbound,
        pr_app = p.pricing_relay,
        pr = p.pricing_relay,
        pa = p.pricing_admin,
    )
}

/// The analysis' name for the row's failure.
pub(super) fn failure_of(fails: InventoryFails) -> Failure {
    match fails {
        InventoryFails::Down => Failure::Down,
        InventoryFails::Unavailable => Failure::Unavailable,
        InventoryFails::Http503 => Failure::Http503,
        InventoryFails::Hang => Failure::Hang,
    }
}

/// Writes `yaml` as `<dir>/mesh.yaml` with certificates beside it; returns the mesh and path.
pub(super) fn write_mesh(dir: &Path, yaml: &str) -> Result<(Mesh, PathBuf), LabError> {
    let mesh = Mesh::from_yaml(yaml).map_err(|d| LabError::Mesh(d.render("mesh.yaml")))?;
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let path = dir.join("mesh.yaml");
    std::fs::write(&path, yaml).map_err(io(format!("cannot write {}", path.display())))?;
    hopwise_proxy::certs::write_dev_certs(&mesh, &dir.join("certs"))
        .map_err(|e| LabError::Failed(format!("cannot write the certificates: {e}")))?;
    Ok((mesh, path))
}

/// The timeout trap's mesh: pricing's proxy alone in front of inventory.
pub(super) fn trap_mesh(
    on: &str,
    upstream: SocketAddr,
    admin: SocketAddr,
    inventory: SocketAddr,
) -> String {
    format!(
        "# hopwise demo retry-chain: the timeout trap
mesh: {{ name: timeout-trap, trust_domain: demo.local }}
defaults: {{ preset: istio }}
services:
  pricing:
    calls:
      inventory:
        per_try_timeout: 300ms
        retries: {{ count: 2, on: [{on}] }}
    copies:
      - {{ upstreams: {{ inventory: \"{upstream}\" }}, admin: \"{admin}\" }}
  inventory:
    external: {{ address: \"{inventory}\" }}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::retry_chain::ISTIO_ON;
    use crate::demo::retry_chain::rows::ROWS;

    fn ports() -> Ports {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        Ports {
            frontend_checkout: a(9001),
            frontend_admin: a(9002),
            checkout_inbound: a(9003),
            checkout_relay: a(9004),
            checkout_admin: a(9005),
            pricing_inbound: a(9006),
            pricing_relay: a(9007),
            pricing_admin: a(9008),
        }
    }

    #[test]
    fn every_rows_mesh_file_is_valid_and_check_predicts_the_seeds_table_under_istio() {
        let inventory = SocketAddr::from(([127, 0, 0, 1], 9009));
        for spec in &ROWS {
            for defaults in [Defaults::Istio, Defaults::Hopwise] {
                let yaml = chain_mesh(spec, defaults, &ports(), inventory);
                let mesh = Mesh::from_yaml(&yaml)
                    .unwrap_or_else(|d| panic!("{}\n{yaml}", d.render("mesh.yaml")));
                let predicted = hopwise_analyze::fanout::row(
                    &mesh,
                    "frontend",
                    "inventory",
                    failure_of(spec.fails),
                )
                .map(|r| r.attempts);
                match defaults {
                    Defaults::Istio => assert_eq!(predicted, Some(spec.seed), "{}", spec.key),
                    Defaults::Hopwise => {
                        let per_call = predicted.unwrap_or(0) / u64::from(spec.app_retries + 1);
                        assert!(per_call <= 3, "{}: {predicted:?}", spec.key);
                    }
                }
            }
        }
    }

    #[test]
    fn the_trap_mesh_is_valid() {
        let a = SocketAddr::from(([127, 0, 0, 1], 9001));
        for on in [ISTIO_ON.to_owned(), format!("{ISTIO_ON}, reset")] {
            let yaml = trap_mesh(&on, a, SocketAddr::from(([127, 0, 0, 1], 9002)), a);
            assert!(Mesh::from_yaml(&yaml).is_ok(), "{yaml}");
        }
    }
}
