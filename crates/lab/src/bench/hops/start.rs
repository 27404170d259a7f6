//! Starting one chain of `bench hops` ([`super::Bench`]): its backend, then each hop's two
//! sides, hopwise's (with hop 1's captured copy first in `--modes captured`) or a peer's,
//! each its own process, every listener waited for. `measure` starts one chain, `--paired`
//! two side by side.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::super::Mode;
use super::super::layout::{self, CALLEE, CALLER, HopCerts, HopPorts, Side};
use super::super::report::{Config, System};
use super::{Bench, Running, captured, observe, peer_system};
use crate::error::{LabError, io};
use crate::processes::ports::hold;

/// One hop being started: the configuration and its mode, the hop's number (1-based) and
/// ports, the measurement's directory.
#[derive(Clone, Copy)]
struct HopAt<'a> {
    c: &'a Config,
    mode: Mode,
    k: usize,
    ports: &'a HopPorts,
    dir: &'a Path,
}

/// Which process listens for which side of a hop (indices into `Running::procs`).
type Started = Vec<(Side, usize)>;

impl Bench<'_> {
    fn spawn(
        &self,
        running: &mut Running<'_>,
        name: String,
        cmd: Command,
        log: &Path,
        proxy: bool,
    ) -> Result<usize, LabError> {
        let (p, _) = self.sup.spawn(&name, cmd, log, false)?;
        running.procs.push(p);
        let i = running.procs.len() - 1;
        if proxy {
            running.proxies.push(i);
        }
        Ok(i)
    }

    /// Starts `c`'s backend and chain (files in `cdir`) and waits until every one listens:
    /// the processes, the chain's entry, the backend's address.
    pub(super) fn start_chain(
        &self,
        c: &Config,
        cdir: &Path,
    ) -> Result<(Running<'_>, SocketAddr, SocketAddr), LabError> {
        std::fs::create_dir_all(cdir).map_err(io(format!("cannot create {}", cdir.display())))?;
        let mut running = Running {
            sup: self.sup,
            procs: Vec::new(),
            proxies: Vec::new(),
            captured: None,
            held: Vec::new(),
        };
        let held = hold(1)?;
        let backend = held.addrs()[0];
        running.held.push(held);
        let mut cmd = self.command(&self.exe);
        cmd.args(["bench", "backend", "--listen"])
            .arg(backend.to_string());
        let b = self.spawn(
            &mut running,
            "the bench backend".into(),
            cmd,
            &cdir.join("backend.stderr"),
            false,
        )?;
        let mut waits = vec![(b, backend)];
        let entry = if c.hops == 0 {
            backend
        } else {
            let held = hold(2 * c.hops)?;
            let hops = layout::chain(held.addrs(), backend);
            running.held.push(held);
            let mode = c.mode.unwrap_or(Mode::Mtls);
            for (k0, hop) in hops.iter().enumerate() {
                let k = k0 + 1;
                let at = HopAt {
                    c,
                    mode,
                    k,
                    ports: hop,
                    dir: cdir,
                };
                for (side, i) in self.start_hop(&mut running, &at)? {
                    waits.push((
                        i,
                        match side {
                            Side::Out => hop.out,
                            Side::In => hop.inbound,
                        },
                    ));
                }
            }
            hops[0].out
        };
        for (i, addr) in waits {
            self.sup.wait_listening(&running.procs[i], addr)?;
        }
        Ok((running, entry, backend))
    }

    /// Starts hopwise's two sides of a hop; for hop 1 of a captured chain, its captured copy
    /// first (kept in `running`), the outbound side's capture listener inside it.
    fn start_hopwise(
        &self,
        running: &mut Running<'_>,
        at: &HopAt<'_>,
    ) -> Result<Started, LabError> {
        let HopAt {
            c,
            mode,
            k,
            ports: hop,
            dir: cdir,
        } = *at;
        let certs = HopCerts::in_dir(&self.certs_dir(k));
        let mesh = cdir.join(format!("hop-{k}.yaml"));
        let mut text = layout::hop_mesh(k, hop, &certs.dir, mode == Mode::Tcp);
        let collector = self.collector.as_ref().map(|col| col.addr);
        let logs = cdir.join(format!("hop-{k}-logs"));
        text = observe::with_observe(&text, c.observe, collector, &logs);
        let capture = self
            .capture
            .as_ref()
            .filter(|_| mode == Mode::Captured && k == 1);
        if let Some(cap) = capture {
            text = captured::mesh(&text);
            running.captured = Some(cap.start(&text)?);
        }
        std::fs::create_dir_all(&logs)
            .and_then(|()| std::fs::write(&mesh, text))
            .map_err(io(format!("cannot write {}", mesh.display())))?;
        let workers = self.plan.workers.to_string();
        let mut started = Vec::new();
        for (side, service) in [(Side::Out, CALLER), (Side::In, CALLEE)] {
            let mut cmd = self.command(&self.exe);
            cmd.arg("proxy").arg("--config").arg(&mesh).args([
                "--service",
                service,
                "--workers",
                &workers,
            ]);
            if mode == Mode::Plain {
                cmd.arg("--plaintext");
            }
            let captured = running
                .captured
                .as_ref()
                .filter(|_| side == Side::Out && k == 1);
            if let Some(cap) = captured {
                cmd.args(cap.proxy_args());
            }
            let name = format!("hopwise proxy (hop {k}, {} side)", side.name());
            let log = cdir.join(format!("hop-{k}-{}.stderr", side.name()));
            let i = self.spawn(running, name, cmd, &log, true)?;
            let pid = running.procs[i].pid;
            if let Some(cap) = running
                .captured
                .as_mut()
                .filter(|_| side == Side::Out && k == 1)
            {
                cap.proxy_started(pid)?;
            }
            started.push((side, i));
        }
        Ok(started)
    }

    /// Starts both sides of a hop; returns which process listens for which side.
    fn start_hop(&self, running: &mut Running<'_>, at: &HopAt<'_>) -> Result<Started, LabError> {
        let (mode, k, hop, cdir) = (at.mode, at.k, at.ports, at.dir);
        let certs = HopCerts::in_dir(&self.certs_dir(k));
        let mut started = Vec::new();
        let system = at.c.system;
        match system {
            System::Direct => {}
            System::Hopwise => started = self.start_hopwise(running, at)?,
            System::Nginx | System::Haproxy | System::Envoy => {
                let Some((peer, program)) =
                    self.peers.iter().find(|(p, _)| peer_system(*p) == system)
                else {
                    return Err(LabError::Failed(format!(
                        "{} is not installed",
                        system.name()
                    )));
                };
                for side in [Side::Out, Side::In] {
                    let sdir = cdir.join(format!("hop-{k}-{}", side.name()));
                    std::fs::create_dir_all(&sdir)
                        .map_err(io(format!("cannot create {}", sdir.display())))?;
                    let conf = sdir.join(peer.config_file(side));
                    let text = peer.config(side, hop, mode, &certs, self.plan.workers, &sdir);
                    std::fs::write(&conf, text)
                        .map_err(io(format!("cannot write {}", conf.display())))?;
                    let mut cmd = self.command(program);
                    cmd.args(peer.args(&conf, &sdir, self.plan.workers));
                    let name = format!(
                        "{} (hop {k}, {} side; {})",
                        peer.program(),
                        side.name(),
                        conf.display()
                    );
                    let log = sdir.join("stderr");
                    started.push((side, self.spawn(running, name, cmd, &log, true)?));
                }
            }
        }
        Ok(started)
    }
}
