//! The demos' `hopwise proxy` processes and what their admin endpoints say. [`Proxies`] owns
//! every child it starts and kills them all when dropped — at the end of a row, on an error,
//! or when the demo is interrupted (the demo's future is dropped) — so none outlives the demo.
//! Children run in their own process group, so a terminal's Ctrl-C reaches only the demo,
//! which then stops them itself.

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
        let stderr = self.dir.join(format!("{service}.stderr"));
        let mut cmd = Command::new(&self.hopwise);
        cmd.arg("proxy")
            .arg("--config")
            .arg(mesh)
            .arg("--service")
            .arg(service);
        let (proc, _) = self.sup.spawn(&name, cmd, &stderr, false)?;
        let pid = proc.pid;
        self.started.push(proc);
        let start = Instant::now();
        loop {
            if let Some(status) = self.sup.exited(pid) {
                return Err(LabError::Start {
                    name,
                    why: format!("it exited ({status})"),
                    stderr: tail(&stderr, 40),
                });
            }
            if let Ok(r) = wire::get(admin, "/ready").await
                && r.status == 200
            {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(LabError::Start {
                    name,
                    why: format!(
                        "its admin endpoint {admin} was not ready within {START_TIMEOUT:?}"
                    ),
                    stderr: tail(&stderr, 40),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

/// Did a proxy fail to start because another process took one of its ports between
/// [`super::ports::free_ports`] and the proxy's bind? (Then the scenario is set up again with
/// new ports.)
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
