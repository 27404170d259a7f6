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
        // Its stderr kept in a file of the test's directory: shown if `up` ends or stalls.
        let log = cwd.join("up.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .current_dir(cwd)
            .arg("up")
            .arg(file)
            .args(["--control", &super::free().to_string()])
            .args(["--dashboard", &dashboard.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Up::ready_logged(child, Some(log))
    }

    /// `child` (its stdout piped), once it printed that it is ready.
    pub fn ready(child: Child) -> Up {
        Up::ready_logged(child, None)
    }

    /// [`Up::ready`] for an `up` whose stderr goes to `log`.
    pub fn ready_logged(mut child: Child, log: Option<PathBuf>) -> Up {
        let lines = super::collect_lines(&mut child);
        let mut up = Up { child, lines, log };
        up.wait_line(|l| l == "Ctrl-C stops everything.");
        up
    }

    /// Waits for a line that satisfies `want`; the test fails at once if `up` exits first,
    /// and after 120 s, with what `up` printed on both streams.
    pub fn wait_line(&mut self, want: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut exited_at = None;
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().rev().find(|l| want(l)) {
                return l.clone();
            }
            let exited = self.child.try_wait().unwrap();
            // Its last lines may still be in the pipe when it has exited: a moment for them.
            let gone = exited.is_some()
                && exited_at.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(2);
            assert!(
                !gone && start.elapsed() < Duration::from_secs(120),
                "no such line from up ({}); it printed:\n{}\nand on stderr:\n{}",
                exited.map_or("still running".to_owned(), |s| s.to_string()),
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
