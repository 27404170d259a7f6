//! The demos' `hopwise proxy` processes and what their admin endpoints say. [`Proxies`] owns
//! every child it starts and kills them all when dropped — at the end of a row, on an error,
//! or when the demo is interrupted (the demo's future is dropped) — so none outlives the demo.
//! Children run in their own process group, so a terminal's Ctrl-C reaches only the demo,
//! which then stops them itself.

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::supervisor::{Proc, Supervisor, tail};
use crate::error::LabError;
use crate::samples::wire;

/// How long a proxy may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The proxies of one scenario; see the module docs. The children belong to a
/// [`Supervisor`] (the bench's and `up`'s too), which kills them when dropped.
#[derive(Debug)]
pub struct Proxies {
    hopwise: PathBuf,
    dir: PathBuf,
    sup: Supervisor,
    started: Vec<Proc>,
}

impl Proxies {
    /// Proxies run by `hopwise` (the binary), their stderr written into `dir`.
    pub fn new(hopwise: &Path, dir: &Path) -> Self {
        Proxies {
            hopwise: hopwise.to_owned(),
            dir: dir.to_owned(),
            // The demo watches Ctrl-C itself (its future is dropped, and this with it).
            sup: Supervisor::quiet(),
            started: Vec::new(),
        }
    }

    /// Starts `hopwise proxy --config <mesh> --service <service>` and waits until its admin
    /// endpoint (`admin`, from the mesh file) answers `/ready`.
    pub async fn start(
        &mut self,
        mesh: &Path,
        service: &str,
        admin: SocketAddr,
    ) -> Result<(), LabError> {
        let name = format!("{service}'s proxy");
        let args = ["proxy".as_ref(), "--config".as_ref(), mesh.as_os_str()]
            .into_iter()
            .chain(["--service".as_ref(), service.as_ref()])
            .map(OsStr::to_owned)
            .collect::<Vec<_>>();
        let pid = self.spawn(&name, service, &args)?;
        self.ready(pid, admin).await
    }

    /// Starts `hopwise <args>` as `name`, its stderr in `<dir>/<file>.stderr`; returns its pid.
    pub fn spawn(&mut self, name: &str, file: &str, args: &[OsString]) -> Result<u32, LabError> {
        let stderr = self.dir.join(format!("{file}.stderr"));
        let mut cmd = Command::new(&self.hopwise);
        cmd.args(args);
        let (proc, _) = self.sup.spawn(name, cmd, &stderr, false)?;
        let pid = proc.pid;
        self.started.push(proc);
        Ok(pid)
    }

    /// Waits until the proxy `pid` (started here) answers `/ready` on `admin`; its stderr if it
    /// exits or is not ready in time.
    pub async fn ready(&self, pid: u32, admin: SocketAddr) -> Result<(), LabError> {
        let start = Instant::now();
        loop {
            self.alive(pid)?;
            if let Ok(r) = wire::get(admin, "/ready").await
                && r.status == 200
            {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(self.failed(
                    pid,
                    format!("its admin endpoint {admin} was not ready within {START_TIMEOUT:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `Err` with the process's stderr if `pid` (started here) has exited.
    pub fn alive(&self, pid: u32) -> Result<(), LabError> {
        match self.sup.exited(pid) {
            Some(status) => Err(self.failed(pid, format!("it exited ({status})"))),
            None => Ok(()),
        }
    }

    fn failed(&self, pid: u32, why: String) -> LabError {
        let proc = self.started.iter().find(|p| p.pid == pid);
        LabError::Start {
            name: proc.map(|p| p.name.clone()).unwrap_or_default(),
            why,
            stderr: proc.map(|p| tail(&p.stderr, 40)).unwrap_or_default(),
        }
    }

    /// SIGKILL to one process (a copy that dies without a goodbye), reaped at once.
    pub fn kill(&mut self, pid: u32) {
        self.sup.kill(pid);
        self.started.retain(|p| p.pid != pid);
    }

    /// SIGTERM to one process (a proxy stopped as an operator stops it: it drains), waited for
    /// without blocking the runtime (the apps it drains toward may run on it); killed after
    /// `grace`.
    pub async fn terminate(&mut self, pid: u32, grace: Duration) {
        if let Ok(raw) = i32::try_from(pid) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(raw),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let start = Instant::now();
        while self.sup.exited(pid).is_none() && start.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.kill(pid);
    }

    /// Process ids of the proxies (for tests that check nothing is left behind).
    pub fn pids(&self) -> Vec<u32> {
        self.started.iter().map(|s| s.pid).collect()
    }

    /// The last lines of every proxy's stderr, for an error message.
    pub fn stderr_tails(&self) -> String {
        self.started
            .iter()
            .map(|s| format!("--- {} ---\n{}", s.name, s.stderr_tail(20)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Kills and reaps every proxy.
    pub fn stop(&mut self) {
        for s in self.started.drain(..) {
            self.sup.kill(s.pid);
        }
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How many times a scenario is set up again when a port it picked was taken meanwhile.
pub const PORT_ATTEMPTS: u32 = 3;

/// Did a proxy fail to start because one of its ports was taken? Ports are held
/// ([`super::ports::hold`]), so only a program that binds that very port with `SO_REUSEADDR`
/// can; the scenario is then set up again with new ports.
pub fn port_taken(e: &LabError) -> bool {
    matches!(e, LabError::Start { stderr, .. } if stderr.contains("cannot listen on"))
}

/// A proxy's `/metrics` text.
pub async fn scrape(admin: SocketAddr) -> Result<Metrics, LabError> {
    let r = wire::get(admin, "/metrics")
        .await
        .map_err(|e| LabError::Failed(format!("cannot read the metrics at {admin}: {e}")))?;
    if r.status != 200 {
        return Err(LabError::Failed(format!(
            "the metrics at {admin} answered {}",
            r.status
        )));
    }
    Ok(Metrics(String::from_utf8_lossy(&r.body).into_owned()))
}

/// Prometheus text, read by series.
#[derive(Debug, Clone, Default)]
pub struct Metrics(pub String);

impl Metrics {
    /// The sum of the series of `name` whose labels include every pair of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.series(name)
            .filter(|(l, _)| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// `(labels, value)` of every series of `name`; labels as written between the braces.
    pub fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        self.0.lines().filter_map(move |line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let v: f64 = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, v as u64))
        })
    }

    /// The value of label `key` in a series' label text.
    pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
        let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
        let end = labels[start..].find('"')?;
        Some(&labels[start..start + end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_series_by_labels() {
        let m = Metrics(
            "# HELP hopwise_tries Tries\n\
             hopwise_tries_total{direction=\"outbound\",service=\"inventory\",route=\"inventory\"} 27\n\
             hopwise_tries_total{direction=\"inbound\",service=\"pricing\",route=\"inbound\"} 0\n\
             hopwise_tries_total_other{service=\"inventory\"} 5\n\
             hopwise_retries_skipped_total{service=\"checkout\",route=\"checkout\",reason=\"retried-below\"} 3\n"
                .to_owned(),
        );
        assert_eq!(
            m.sum(
                "hopwise_tries_total",
                &[("direction", "outbound"), ("service", "inventory")]
            ),
            27
        );
        assert_eq!(m.sum("hopwise_tries_total", &[]), 27);
        let (labels, v) = m
            .series("hopwise_retries_skipped_total")
            .next()
            .unwrap_or(("", 0));
        assert_eq!(v, 3);
        assert_eq!(Metrics::label(labels, "reason"), Some("retried-below"));
        assert_eq!(Metrics::label(labels, "nope"), None);
    }
}
