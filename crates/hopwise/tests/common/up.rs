//! A running `hopwise up` for the tests that start one (`up.rs`, `up_captured.rs`,
//! `up_command.rs`): its stdout collected line by line, waited on, signalled, killed when
//! dropped; what it wrote in its run directory, and whether its children are gone.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shop's mesh file.
pub fn shop() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/mesh.yaml")
}

/// A running `hopwise up`, its stdout collected line by line.
pub struct Up {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    /// Where its stderr goes, if to a file: shown when a line does not come.
    pub log: Option<PathBuf>,
}

impl Up {
    /// `hopwise up FILE EXTRA…` in `cwd` on free ports, once it is ready.
    pub fn start(cwd: &Path, file: &Path, extra: &[&str]) -> Up {
        Up::start_with_dashboard(cwd, file, super::free(), extra)
    }

    /// [`Up::start`] with its dashboard on `dashboard`.
    pub fn start_with_dashboard(
        cwd: &Path,
        file: &Path,
        dashboard: std::net::SocketAddr,
        extra: &[&str],
    ) -> Up {
        let child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .current_dir(cwd)
            .arg("up")
            .arg(file)
            .args(["--control", &super::free().to_string()])
            .args(["--dashboard", &dashboard.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Up::ready(child)
    }

    /// `child` (its stdout piped), once it printed that it is ready.
    pub fn ready(child: Child) -> Up {
        Up::ready_logged(child, None)
    }

    /// [`Up::ready`] for an `up` whose stderr goes to `log`.
    pub fn ready_logged(mut child: Child, log: Option<PathBuf>) -> Up {
        let lines = super::collect_lines(&mut child);
        let up = Up { child, lines, log };
        up.wait_line(|l| l == "Ctrl-C stops everything.");
        up
    }

    /// Waits for a line that satisfies `want` (the test fails if `up` exits first).
    pub fn wait_line(&self, want: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().rev().find(|l| want(l)) {
                return l.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no such line from up; it printed:\n{}\nand on stderr:\n{}",
                self.lines.lock().unwrap().join("\n"),
                self.log
                    .as_ref()
                    .and_then(|l| std::fs::read_to_string(l).ok())
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&mut self, s: nix::sys::signal::Signal) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, s).unwrap();
        self.child.wait().unwrap()
    }

    pub fn sigint(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGINT)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run's `samples.json` (`run` is its run directory).
pub fn samples(run: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("samples.json")).unwrap()).unwrap()
}

/// An address written in `samples.json`.
pub fn addr(v: &serde_json::Value) -> std::net::SocketAddr {
    v.as_str().unwrap().parse().unwrap()
}

/// Whether process `pid` runs (a zombie has exited; only its parent's wait is missing).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

/// Waits until none of `pids` is alive (at most 30 s); those still alive.
pub fn until_gone(pids: &[u32]) -> Vec<u32> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) && pids.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    pids.iter().copied().filter(|p| alive(*p)).collect()
}
