//! The client phases of one measurement ([`super::Bench`]): latency (one request at a time on
//! one connection) and the fixed rate with each proxy's CPU read around its measured phase.
//! The client runs as its own process: in the host's namespace against the chain's first port,
//! or, captured, inside the copy's namespace calling the first callee by name.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::super::load::ClientResult;
use super::super::report::CpuSample;
use super::{Bench, Running};
use crate::error::LabError;
use crate::processes::procfs::{self, Ticks};
use crate::processes::supervisor::Proc;

impl Bench<'_> {
    /// The client: against `entry`, or, captured, inside the copy's namespace by name.
    fn client_command(&self, running: &Running<'_>, entry: SocketAddr) -> Command {
        if let Some(captured) = &running.captured {
            return captured.client(self.taskset.as_deref(), &self.exe);
        }
        let mut cmd = self.command(&self.exe);
        cmd.args(["bench", "client", "--target"])
            .arg(entry.to_string());
        cmd
    }

    /// Runs the client to its end; its JSON result, or why it failed with `stderr` (the
    /// proxies').
    pub(super) fn finish_client<T: serde::de::DeserializeOwned>(
        &self,
        stderr: &dyn Fn() -> String,
        client: &Proc,
        last_line: &str,
    ) -> Result<T, LabError> {
        let status = self.sup.wait(client.pid)?;
        self.sup.check()?;
        if !status.success() {
            return Err(client_failed(
                &format!("{status}: {}", client.stderr_tail(10).trim()),
                stderr,
            ));
        }
        serde_json::from_str(last_line.trim()).map_err(|e| {
            client_failed(
                &format!("unreadable result `{}`: {e}", last_line.trim()),
                stderr,
            )
        })
    }

    /// [`Self::finish_client`]'s one result, tolerating failed requests up to 1 %.
    fn client_result(
        &self,
        running: &Running<'_>,
        client: &Proc,
        last_line: &str,
    ) -> Result<ClientResult, LabError> {
        let stderr = || running.proxy_stderr();
        let r: ClientResult = self.finish_client(&stderr, client, last_line)?;
        check_errors(&r, &stderr)?;
        Ok(r)
    }

    pub(super) fn client_latency(
        &self,
        running: &Running<'_>,
        entry: SocketAddr,
        cdir: &Path,
    ) -> Result<ClientResult, LabError> {
        let mut cmd = self.client_command(running, entry);
        cmd.arg("--requests")
            .arg(self.plan.requests.to_string())
            .arg("--warmup")
            .arg(self.plan.warmup.to_string());
        let (client, last) = self.run_client(cmd, &cdir.join("client.stderr"))?;
        self.client_result(running, &client, &last)
    }

    /// Starts the client (`log`: its stderr) and reads its stdout to the end: the process and
    /// its last line (the result).
    pub(super) fn run_client(&self, cmd: Command, log: &Path) -> Result<(Proc, String), LabError> {
        let (client, stdout) = self.sup.spawn("the bench client", cmd, log, true)?;
        let mut text = String::new();
        if let Some(mut s) = stdout {
            let _ = s.read_to_string(&mut text);
        }
        let last = text.lines().last().unwrap_or_default().to_owned();
        Ok((client, last))
    }

    pub(super) fn client_rate(
        &self,
        running: &Running<'_>,
        entry: SocketAddr,
        cdir: &Path,
    ) -> Result<(CpuSample, ClientResult), LabError> {
        let duration = Duration::from_secs_f64(self.plan.duration_s);
        let warm = (duration / 5).min(Duration::from_secs(1));
        let mut cmd = self.client_command(running, entry);
        cmd.arg("--rate")
            .arg(self.plan.rate.to_string())
            .arg("--duration")
            .arg(format!("{}us", duration.as_micros()))
            .arg("--warmup-time")
            .arg(format!("{}us", warm.as_micros()))
            .arg("--connections")
            .arg(self.plan.connections.to_string());
        let (client, stdout) = self.sup.spawn(
            "the bench client",
            cmd,
            &cdir.join("client-rate.stderr"),
            true,
        )?;
        let trees: Vec<Vec<u32>> = running
            .proxies
            .iter()
            .map(|&i| procfs::tree(running.procs[i].pid))
            .collect();
        let mut before = None;
        let mut after = None;
        let mut last = String::new();
        if let Some(s) = stdout {
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if line.trim() == "start" {
                    before = Some((
                        Instant::now(),
                        trees
                            .iter()
                            .map(|t| procfs::tree_cpu_ticks(t))
                            .collect::<Vec<_>>(),
                    ));
                } else if line.trim_start().starts_with('{') {
                    after = Some((
                        Instant::now(),
                        trees
                            .iter()
                            .map(|t| procfs::tree_cpu_ticks(t))
                            .collect::<Vec<_>>(),
                    ));
                    last = line;
                }
            }
        }
        let r = self.client_result(running, &client, &last)?;
        let (Some((t0, b)), Some((t1, a))) = (before, after) else {
            return Err(LabError::Failed(
                "the bench client did not report its measured phase".into(),
            ));
        };
        let wall = t1.duration_since(t0).as_secs_f64().max(1e-9);
        let used: Vec<Ticks> = a.iter().zip(&b).map(|(a, b)| a.since(*b)).collect();
        let cpu = CpuSample {
            rate: r.requests as f64 / wall,
            seconds: wall,
            cores: used
                .iter()
                .map(|t| t.total() as f64 / self.clk_tck / wall)
                .collect(),
            kernel: used
                .iter()
                .map(|t| t.system as f64 / (t.total() as f64).max(1.0))
                .collect(),
            connections: r.connections,
            missed: r.missed,
            reconnects: r.reconnects,
        };
        Ok((cpu, r))
    }
}

fn client_failed(why: &str, stderr: &dyn Fn() -> String) -> LabError {
    LabError::Failed(format!("the bench client failed: {why}{}", stderr()))
}

/// A rare failure is the chain's business (and reported); more than 1 % is broken.
pub(super) fn check_errors(r: &ClientResult, stderr: &dyn Fn() -> String) -> Result<(), LabError> {
    if r.errors * 100 > r.requests + r.errors || r.requests == 0 {
        return Err(client_failed(
            &format!(
                "{} of {} request(s) failed; the first: {}",
                r.errors,
                r.requests + r.errors,
                r.first_error.as_deref().unwrap_or("?")
            ),
            stderr,
        ));
    }
    Ok(())
}
