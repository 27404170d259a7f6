//! A running `hopwise up` for the tests that start one (tests/up.rs, tests/shop_trace.rs).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::free;

/// A running `hopwise up`, its stdout collected line by line.
pub struct Up {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Up {
    pub fn start(cwd: &Path, file: &Path, extra: &[&str]) -> Up {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
            .current_dir(cwd)
            .arg("up")
            .arg(file)
            .args(["--control", &free().to_string()])
            .args(["--dashboard", &free().to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push(line);
            }
        });
        let up = Up { child, lines };
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
                "no such line from up; it printed:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn sigint(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
