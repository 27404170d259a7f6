//! Helpers shared by the tests that run `hopwise` as real processes: free ports, children that
//! die with the test, and starting a command that announces itself on its first line.

#![allow(dead_code, clippy::unwrap_used)] // each test file uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

pub mod captured;
pub mod echo;
pub mod etcd;
pub mod netns;
pub mod run;
pub mod traffic;
pub mod up;

/// A loopback port nothing listens on (yet), held for this test process's life.
///
/// A port found free and released can be taken before the child binds it (another test's
/// connection gets it as its source port); a held one cannot, and the child still binds it
/// (`hopwise_lab::processes::ports`). Held ones are never handed out twice.
pub fn free() -> SocketAddr {
    static HELD: std::sync::Mutex<Vec<hopwise_lab::processes::ports::Held>> =
        std::sync::Mutex::new(Vec::new());
    let held = hopwise_lab::processes::ports::hold(1).unwrap();
    let addr = held.addrs()[0];
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(held);
    addr
}

/// Every line `child` writes on its (piped) stdout, collected as it comes by a thread.
pub fn collect_lines(child: &mut Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// A child process, killed when dropped (a failing test leaves nothing behind).
pub struct Proc(pub Child);

impl Proc {
    /// SIGKILL: no goodbye.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `hopwise ARGS` and waits for the first line of its output.
pub fn spawn(args: &[&str]) -> Proc {
    spawn_with(args, Stdio::null())
}

/// [`spawn`], with its log (stderr) sent to `stderr`.
pub fn spawn_with(args: &[&str], stderr: Stdio) -> Proc {
    start(args, stderr, None)
}

/// [`spawn`], with its log (stderr) written to the file `log`, shown if it prints nothing.
pub fn spawn_logged(args: &[&str], log: &std::path::Path) -> Proc {
    start(args, std::fs::File::create(log).unwrap().into(), Some(log))
}

fn start(args: &[&str], stderr: Stdio, log: Option<&std::path::Path>) -> Proc {
    try_start(args, stderr, log).unwrap_or_else(|log| {
        panic!("hopwise {args:?} printed nothing; its log:\n{log}");
    })
}

/// [`spawn_logged`], or, when the command ends without printing a line (a refusal), its log.
pub fn try_spawn_logged(args: &[&str], log: &std::path::Path) -> Result<Proc, String> {
    try_start(args, std::fs::File::create(log).unwrap().into(), Some(log))
}

fn try_start(args: &[&str], stderr: Stdio, log: Option<&std::path::Path>) -> Result<Proc, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise"));
    cmd.args(args);
    let (proc, line) = first_line(cmd, stderr);
    if line.is_empty() {
        drop(proc);
        return Err(log
            .and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default());
    }
    Ok(proc)
}

/// Starts `cmd` (killed when the returned [`Proc`] drops) and reads its first line of stdout;
/// the rest of its stdout is left unread.
pub fn first_line(mut cmd: Command, stderr: Stdio) -> (Proc, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (Proc(child), line)
}

/// Runs `hopwise ARGS` to the end (a command that hangs fails the test after 30 s): its
/// stdout and stderr together.
pub fn run(args: &[&str]) -> String {
    run_status(args).1
}

/// [`run`], with the exit status.
pub fn run_status(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hopwise {args:?} did not finish within 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// An app that answers every request with `name` (HTTP/1.1, keep-alive).
pub fn backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_nodelay(true);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let body = name.as_bytes();
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    if conn
                        .write_all(head.as_bytes())
                        .and_then(|_| conn.write_all(body))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// One GET on its own connection; the whole response as text ("no connection" when refused).
pub fn http_get(addr: SocketAddr, path: &str, host: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "no connection".to_owned();
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One POST of a JSON body on its own connection; the whole response as text.
pub fn http_post(addr: SocketAddr, path: &str, host: &str, json: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return "no connection".to_owned();
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{json}",
            json.len()
        )
        .as_bytes(),
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `GET /` to service b through a caller's port for it.
pub fn get(port: SocketAddr) -> String {
    http_get(port, "/", "b")
}

/// The body of a response read by [`http_get`].
pub fn body(resp: &str) -> &str {
    resp.split("\r\n\r\n").nth(1).unwrap_or("")
}

/// Sends requests until every one of `want` has answered, or `limit` passes.
pub fn until_all(port: SocketAddr, want: &[&str], limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    let mut seen: Vec<String> = Vec::new();
    while std::time::Instant::now() < deadline {
        seen.push(body(&get(port)).to_owned());
        if want.iter().all(|w| seen.iter().any(|s| s == w)) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// The sum of the samples in a proxy's `/metrics` (on `admin`) whose line starts with
/// `name_and_labels`.
pub fn metric(admin: SocketAddr, name_and_labels: &str) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nhost: {admin}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines()
        .filter(|l| l.starts_with(name_and_labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Why the browser tests cannot run here (`None`: they can): Debian's chromium, the
/// playwright-core of `tests/browser/node_modules` and node (scripts/test installs them).
pub fn browser_missing(root: &std::path::Path) -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists() {
        return Some(format!("{chromium} is missing (apt-get install chromium)"));
    }
    if !root
        .join("tests/browser/node_modules/playwright-core")
        .exists()
    {
        return Some("tests/browser/node_modules is missing (npm ci in tests/browser)".into());
    }
    Command::new("node")
        .arg("--version")
        .output()
        .err()
        .map(|e| format!("node: {e}"))
}
