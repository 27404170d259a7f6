//! `hopwise run` as the capture tests use it (`capture.rs`, `capture_ipv6.rs`): a mesh of
//! web calling fee with its certificates made, `hopwise run` started inside a test's [`Host`]
//! namespace, and what a run says on stderr.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Output, Stdio};

use super::netns::Host;

pub use super::netns::HOPWISE;

/// `hopwise run` in a test's host namespace.
pub trait RunIn {
    fn run(&self, mesh: &str, state: &str, service: &str, command: &[&str]) -> Command;
}

impl RunIn for Host {
    /// `hopwise run` of `service` inside this namespace, with the mesh file and state given,
    /// running `command`.
    fn run(&self, mesh: &str, state: &str, service: &str, command: &[&str]) -> Command {
        let mut c = self.hopwise(&["run", "--config", mesh, "--service", service]);
        c.args(["--state", state, "--"]).args(command);
        c
    }
}

/// Starts `cmd` and waits for the first line of its stdout (a proxy prints it once bound).
pub fn start_announced(cmd: Command) -> super::Proc {
    let (proc, line) = super::first_line(cmd, Stdio::inherit());
    assert!(line.starts_with("hopwise proxy for"), "it said {line:?}");
    proc
}

/// The mesh of these tests, its certificates made, in a fresh directory.
pub fn mesh(dir: &Path, fee_sample: bool) -> PathBuf {
    mesh_with(dir, fee_sample, "refuse")
}

/// [`mesh`] with the egress rule given.
pub fn mesh_with(dir: &Path, fee_sample: bool, egress: &str) -> PathBuf {
    let sample = if fee_sample { "\n    sample: leaf" } else { "" };
    let text = format!(
        "mesh: {{ name: capture-test, certs: certs, capture: {{ egress: {egress} }} }}
services:
  web:
    copies: [{{ admin: '127.0.0.1:9901' }}]
    calls: {{ fee: {{}} }}
  fee:{sample}
    copies: [{{ app: '127.0.0.1:7002', inbound: '127.0.0.1:7102' }}]
"
    );
    mesh_text(dir, &text)
}

/// `text` as `mesh.yaml` in `dir`, its certificates made (`hopwise certs`).
pub fn mesh_text(dir: &Path, text: &str) -> PathBuf {
    let file = dir.join("mesh.yaml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(HOPWISE)
        .args(["certs", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    file
}

/// The run id `hopwise run` announced on stderr (`… in namespace hopwise-<id> …`).
pub fn run_id(stderr: &str) -> String {
    let at = stderr
        .find("in namespace hopwise-")
        .unwrap_or_else(|| panic!("no namespace announced:\n{stderr}"));
    stderr[at + "in namespace hopwise-".len()..][..8].to_owned()
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Starts a `hopwise run` command with its stderr piped; the child, its stderr past the first
/// line, and the run id that line announced.
pub fn start_run(mut cmd: Command) -> (Child, BufReader<ChildStderr>, String) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    (child, err, run_id(&line))
}
