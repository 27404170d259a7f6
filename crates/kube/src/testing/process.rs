//! One child process of a test API server (etcd or kube-apiserver): where the binaries are,
//! a free loopback port, the start, the readiness wait and the stop by pid. Each child runs
//! under `setpriv --pdeathsig KILL` (util-linux), so the kernel kills it when the thread that
//! started it dies, even by SIGKILL: the idea of the lab's `tie_to_parent`, which cannot serve
//! here because etcd and kube-apiserver are not ours to make call `prctl` themselves, and a
//! `pre_exec` hook would need `unsafe` (forbidden in the workspace). Its output goes to a log
//! file whose last lines every error carries.

use std::ffi::OsStr;
use std::fs::File;
use std::future::Future;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Error;

/// The script that builds the binaries and prints their directory.
const TESTBIN_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kube-testbin");

/// How many log lines an error carries.
const TAIL_LINES: usize = 20;

/// The directory holding `etcd` and `kube-apiserver`: `KUBE_TESTBIN_DIR` when set, else what
/// `scripts/kube-testbin` prints (it builds what is missing first: minutes, once per machine).
pub(super) fn testbin() -> Result<PathBuf, Error> {
    let dir = match std::env::var_os("KUBE_TESTBIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let out = Command::new(TESTBIN_SCRIPT)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| Error::Testbin(format!("running {TESTBIN_SCRIPT}: {e}")))?;
            if !out.status.success() {
                return Err(Error::Testbin(format!(
                    "{TESTBIN_SCRIPT} failed ({}); its error is above",
                    out.status
                )));
            }
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    binaries_in(dir)
}

/// `dir`, if it holds both binaries.
fn binaries_in(dir: PathBuf) -> Result<PathBuf, Error> {
    for name in ["etcd", "kube-apiserver"] {
        if !dir.join(name).is_file() {
            return Err(Error::Testbin(format!("{} has no {name}", dir.display())));
        }
    }
    Ok(dir)
}

/// A loopback port nothing listened on a moment ago. Another process may take it before the
/// child binds it: the start tries again on "address already in use" ([`Process::port_taken`]).
pub(super) fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("binding a loopback port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("reading a bound port", e))?
        .port();
    Ok(port)
}

/// A running child, its name and its log.
#[derive(Debug)]
pub(super) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// How a child ended when it was stopped.
#[derive(Debug, Clone, Copy)]
pub struct Stop {
    /// Its pid, now reaped.
    pub pid: u32,
    /// Whether it outlived its SIGTERM's grace and was killed.
    pub killed: bool,
    /// From the SIGTERM to the reaped exit.
    pub took: Duration,
}

impl Process {
    /// Starts `program` with `args`, its stdout and stderr into `log`, tied to this thread.
    pub(super) fn start<I, S>(
        name: &'static str,
        program: &Path,
        args: I,
        log: PathBuf,
    ) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = File::create(&log).map_err(|e| Error::io(format!("creating {name}'s log"), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("opening {name}'s log"), e))?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Spawn { name, source: e })?;
        Ok(Process { name, child, log })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `ready` every 50 ms until it answers true, the child exits or `bound` passes.
    pub(super) async fn wait_ready<F, R>(
        &mut self,
        bound: Duration,
        mut ready: F,
    ) -> Result<(), Error>
    where
        F: FnMut() -> R,
        R: Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            if ready().await {
                return Ok(());
            }
            if let Some(status) = self.exited()? {
                return Err(Error::Exited {
                    name: self.name,
                    status,
                    tail: self.tail(),
                });
            }
            if start.elapsed() > bound {
                return Err(Error::NotReady {
                    name: self.name,
                    bound,
                    tail: self.tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the child failed to start because its port was taken meanwhile.
    pub(super) fn port_taken(error: &Error) -> bool {
        matches!(error, Error::Exited { tail, .. } if tail.contains("address already in use"))
    }

    fn exited(&mut self) -> Result<Option<ExitStatus>, Error> {
        self.child
            .try_wait()
            .map_err(|e| Error::io(format!("waiting for {}", self.name), e))
    }

    /// The last lines of its log.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// SIGTERM, then SIGKILL once `grace` has passed; returns when the pid is reaped. Blocks
    /// the thread (Drop cannot await).
    pub(super) fn stop(mut self, grace: Duration) -> Result<Stop, Error> {
        let pid = self.pid();
        let start = Instant::now();
        let stop = |killed| Stop {
            pid,
            killed,
            took: start.elapsed(),
        };
        if self.exited()?.is_some() {
            return Ok(stop(false));
        }
        let raw = i32::try_from(pid).map_err(|_| Error::Stop {
            name: self.name,
            pid,
            source: std::io::Error::other("pid out of range"),
        })?;
        // ESRCH: it exited between the look and the signal; the wait below reaps it.
        let _ = kill(Pid::from_raw(raw), Signal::SIGTERM);
        while start.elapsed() < grace {
            if self.exited()?.is_some() {
                return Ok(stop(false));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let name = self.name;
        let reaped = self.child.kill().and_then(|()| self.child.wait());
        reaped.map_err(|source| Error::Stop { name, pid, source })?;
        Ok(stop(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_binaries_is_an_error_naming_the_script() {
        let empty = tempfile::tempdir().unwrap();
        let err = binaries_in(empty.path().to_owned())
            .unwrap_err()
            .to_string();
        assert!(err.contains("has no etcd"), "{err}");
        assert!(err.contains("scripts/kube-testbin"), "{err}");
    }
}
