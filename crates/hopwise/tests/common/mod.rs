//! Helpers shared by the tests that run `hopwise` as real processes: free ports, children that
//! die with the test, and starting a command that announces itself on its first line.

#![allow(dead_code, clippy::unwrap_used)] // each test file uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

/// A loopback port nothing listens on (yet).
pub fn free() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A child process, killed when dropped (a failing test leaves nothing behind).
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `hopwise ARGS` and waits for the first line of its output.
pub fn spawn(args: &[&str]) -> Proc {
    spawn_with(args, Stdio::null())
}

/// [`spawn`], with its log (stderr) sent to `stderr`.
pub fn spawn_with(args: &[&str], stderr: Stdio) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(!line.is_empty(), "hopwise {args:?} printed nothing");
    Proc(child)
}

/// The sum of the samples in a proxy's `/metrics` (on `admin`) whose line starts with
/// `name_and_labels`.
pub fn metric(admin: SocketAddr, name_and_labels: &str) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .filter(|l| l.starts_with(name_and_labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
