//! `bench hops --modes captured`: the `mtls` chains with their client captured. Only the
//! client can be: every later hop's caller is the previous hop's inbound proxy, which forwards
//! straight to the next outbound proxy's port (the bench has no app between hops to capture).
//! So a captured chain of N hops is the mTLS chain of N hops whose first hop is taken by
//! capture: the client runs in a network namespace of its own (made by
//! [`crate::capture::CapturedCopy`], as `hopwise run` makes one, for hop 1's `caller`) and calls
//! `callee:80` by name, the namespace's nftables rules redirect the call to hop 1's outbound
//! proxy's capture listener, and that proxy finds the service from the original destination
//! and the `Host` header. Its difference from the mTLS chain of the same length is the cost of
//! capture, and nothing else ([`super::super::report`] computes it).
//!
//! This file owns what the mode adds to a measurement: refusing without root, `ip` or `nft`;
//! sweeping what a crashed bench left (its records under its own state directory, so it sweeps
//! only what is provably the bench's); the copy of one measurement and the proxy's arguments;
//! the client's command inside the namespace; the proxy's count of captured connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use hopwise_model::Mesh;

use super::super::layout::{CALLEE, CALLER};
use crate::capture::{self, CapturedCopy, Tools, record};
use crate::error::{LabError, io};
use crate::processes::ports::{Held, hold};
use crate::processes::proxies::scrape;

/// Where the bench records its namespaces unless `--state` says otherwise: apart from
/// `hopwise run`'s records, so each sweeps only its own.
pub const CAPTURE_STATE: &str = "/run/hopwise/bench";

/// The bench's capture range: apart from `hopwise run`'s default (100.77.0.0/16), so the link
/// it adds to this namespace never shares an address with a live run's.
const RANGE: &str = "100.79.0.0/16";

/// The port the client calls the callee on, by name (the captured connection's original one).
const PORT: u16 = 80;

/// What the mode needs for the whole bench: the tools, the state, a runtime to read metrics.
#[derive(Debug)]
pub struct Capture {
    tools: Tools,
    state: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Capture {
    /// Refuses, naming what is missing, unless this is root with `ip` and `nft` (or
    /// `iptables-restore`); then removes what dead benches recorded under `state` (their ids).
    pub fn prepare(state: &Path) -> Result<(Capture, Vec<String>), LabError> {
        let tools =
            Tools::find().map_err(|e| LabError::Failed(format!("--modes captured: {e}")))?;
        if !capture::is_root() {
            return Err(LabError::Failed(
                "--modes captured makes a network namespace and capture rules for the client, as \
                 `hopwise run` does: run the bench as root, or without `captured` in --modes"
                    .into(),
            ));
        }
        let swept = record::sweep(state, &tools);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("cannot start a runtime"))?;
        let c = Capture {
            tools,
            state: state.to_owned(),
            rt,
        };
        Ok((c, swept))
    }

    /// Makes hop 1's captured copy from its mesh file's text ([`mesh`]'s), and picks the admin
    /// port its proxy's counts are read on.
    pub fn start(&self, mesh_text: &str) -> Result<Captured, LabError> {
        let mesh = Mesh::from_yaml(mesh_text).map_err(|d| {
            LabError::Failed(format!(
                "the bench wrote an invalid mesh file (a bug): {}",
                d.render("hop-1.yaml")
            ))
        })?;
        let callee = mesh
            .services
            .get(CALLEE)
            .and_then(|s| s.address)
            .ok_or_else(|| LabError::Failed(format!("hop 1's {CALLEE} has no address (a bug)")))?;
        let copy = CapturedCopy::make(&mesh, CALLER, 0, None, &self.state, &self.tools)?;
        let held = hold(1)?;
        let admin = held.addrs()[0];
        Ok(Captured {
            copy,
            admin,
            _held: held,
            callee: SocketAddr::new(callee, PORT),
        })
    }

    /// How many captured connections the proxy at `admin` sent to a service.
    pub fn counted(&self, c: &Captured) -> Result<u64, LabError> {
        let m = self.rt.block_on(scrape(c.admin))?;
        Ok(m.sum(
            "hopwise_captured_connections_total",
            &[("outcome", "service")],
        ))
    }
}

/// One measurement's captured copy (removed when dropped, after the processes: `Running`
/// drops it last) and its proxy's admin port.
#[derive(Debug)]
pub struct Captured {
    copy: CapturedCopy,
    admin: SocketAddr,
    _held: Held,
    /// `callee:80` as the namespace's hosts file resolves it.
    callee: SocketAddr,
}

impl Captured {
    /// The namespace's name (in the sample, so a test can check it is gone).
    pub fn netns(&self) -> &str {
        &self.copy.plan().names.netns
    }

    /// What `--paired`'s client calls, from a connection made inside the namespace: `callee:80`
    /// resolved as the hosts file does, and the namespace (`/run/netns/NAME`).
    pub fn paired_target(&self) -> (SocketAddr, String) {
        (self.callee, self.copy.plan().names.netns_path())
    }

    /// What hop 1's outbound proxy adds to the mTLS one's command line: its capture listener
    /// in the namespace, and an admin port for the counts (no request touches it).
    pub fn proxy_args(&self) -> Vec<String> {
        let mut a = self.copy.proxy_args();
        a.extend(["--admin".to_owned(), self.admin.to_string()]);
        a
    }

    /// Records the proxy, so that a crashed bench's sweep stops that very process.
    pub fn proxy_started(&mut self, pid: u32) -> Result<(), LabError> {
        self.copy.proxy_started(pid)
    }

    /// `hopwise bench client` inside the namespace (under `taskset` when given), calling the
    /// callee by name as a captured app does: `callee:80`, `Host: callee`.
    pub fn client(&self, taskset: Option<&Path>, exe: &Path) -> Command {
        let mut cmd = match taskset {
            Some(t) => {
                let mut c = self.copy.command(t);
                c.args(["-c", "0"]).arg(exe);
                c
            }
            None => self.copy.command(exe),
        };
        cmd.args(["bench", "client", "--target"])
            .arg(format!("{CALLEE}:{PORT}"))
            .args(["--host", CALLEE]);
        cmd
    }
}

/// Hop 1's mesh file with the bench's capture range.
pub fn mesh(hop_mesh: &str) -> String {
    hop_mesh.replacen(
        "mesh:\n",
        &format!("mesh:\n  capture: {{ range: {RANGE} }}\n"),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::layout::{self, HopPorts};

    #[test]
    fn the_first_hop_s_mesh_takes_the_bench_s_range_and_nothing_else() {
        let a = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let ports = HopPorts {
            out: a(1),
            inbound: a(2),
            app: a(3),
        };
        let plain = layout::hop_mesh(1, &ports, Path::new("/tmp/certs"), false);
        let text = mesh(&plain);
        let m = Mesh::from_yaml(&text).unwrap();
        assert_eq!(m.capture.range.to_string(), RANGE);
        // The callee's name resolves, in the namespace, to an address of the bench's range.
        let callee = m.services[CALLEE].address.unwrap();
        assert!(m.capture.range.contains(callee), "{callee}");
        assert_eq!(
            text.replace(&format!("  capture: {{ range: {RANGE} }}\n"), ""),
            plain
        );
    }
}
