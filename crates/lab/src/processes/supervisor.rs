//! The lab's child processes (the bench's, the demos' proxies, `hopwise up`'s). A
//! [`Supervisor`] owns every child: it kills them all when dropped (the end of a measurement,
//! or an error) and on Ctrl-C/SIGTERM ([`Supervisor::quiet`] leaves signals to its caller,
//! which stops the children itself), so no process outlives the lab. Children run in their own
//! process group, so a terminal's Ctrl-C reaches only us.

use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{LabError, io};

/// How long a process may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Shared {
    children: Mutex<HashMap<u32, Child>>,
    interrupted: AtomicBool,
}

impl Shared {
    fn children(&self) -> MutexGuard<'_, HashMap<u32, Child>> {
        match self.children.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn kill_all(&self) {
        let mut children = self.children();
        for (pid, child) in children.iter_mut() {
            kill_group(*pid, child);
        }
        for (_, mut child) in children.drain() {
            let _ = child.wait();
        }
    }
}

/// Owns the children; see the module docs.
#[derive(Debug)]
pub struct Supervisor {
    shared: Arc<Shared>,
    /// Whose children these are, for [`LabError::Interrupted`] (`the bench`).
    who: &'static str,
}

/// A started child, by pid (the [`Supervisor`] holds the handle).
#[derive(Debug, Clone)]
pub struct Proc {
    pub name: String,
    pub pid: u32,
    pub stderr: PathBuf,
}

impl Proc {
    /// What the process wrote to stderr, at most the last `lines` lines.
    pub fn stderr_tail(&self, lines: usize) -> String {
        tail(&self.stderr, lines)
    }
}

impl Supervisor {
    /// Starts the signal watcher: on Ctrl-C or SIGTERM every child is killed and
    /// [`Supervisor::interrupted`] turns true.
    pub fn new(who: &'static str) -> Result<Self, LabError> {
        let shared = Arc::new(Shared::default());
        let watcher = shared.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("cannot start the signal watcher"))?;
        std::thread::Builder::new()
            .name("bench-signals".into())
            .spawn(move || {
                rt.block_on(hopwise_proxy::server::shutdown_signal());
                watcher.interrupted.store(true, Ordering::SeqCst);
                watcher.kill_all();
            })
            .map_err(io("cannot start the signal watcher"))?;
        Ok(Supervisor { shared, who })
    }

    /// A supervisor without the signal watcher, for a caller that handles Ctrl-C itself (to
    /// stop its children gently, as `hopwise up` does). Dropping it still kills them all.
    pub fn quiet() -> Self {
        Supervisor {
            shared: Arc::new(Shared::default()),
            who: "the lab",
        }
    }

    /// Asks processes to stop (SIGTERM to each one's group), waits up to `grace` for them to
    /// exit, then kills those that have not; reaps them all.
    pub fn terminate(&self, pids: &[u32], grace: Duration) {
        let mut children: Vec<(u32, Child)> = {
            let mut owned = self.shared.children();
            pids.iter()
                .filter_map(|p| owned.remove(p).map(|c| (*p, c)))
                .collect()
        };
        for (pid, _) in &children {
            if let Ok(p) = i32::try_from(*pid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        let start = Instant::now();
        while !children.is_empty() && start.elapsed() < grace {
            // Reaped ones leave the list: their pids may be reused, so nothing more is sent.
            children.retain_mut(|(_, c)| !matches!(c.try_wait(), Ok(Some(_))));
            std::thread::sleep(Duration::from_millis(10));
        }
        for (pid, mut c) in children {
            kill_group(pid, &mut c);
            let _ = c.wait();
        }
    }

    /// The process ids of every child still owned.
    pub fn pids(&self) -> Vec<u32> {
        self.shared.children().keys().copied().collect()
    }

    pub fn interrupted(&self) -> bool {
        self.shared.interrupted.load(Ordering::SeqCst)
    }

    /// `Err(Interrupted)` once Ctrl-C was pressed.
    pub fn check(&self) -> Result<(), LabError> {
        if self.interrupted() {
            Err(LabError::Interrupted { who: self.who })
        } else {
            Ok(())
        }
    }

    /// Starts `cmd` with stderr to `stderr` and stdout to a pipe (returned) or nowhere.
    pub fn spawn(
        &self,
        name: &str,
        mut cmd: Command,
        stderr: &Path,
        pipe_stdout: bool,
    ) -> Result<(Proc, Option<ChildStdout>), LabError> {
        self.check()?;
        let err_file =
            File::create(stderr).map_err(io(format!("cannot create {}", stderr.display())))?;
        cmd.stdin(Stdio::null())
            .stderr(err_file)
            .stdout(if pipe_stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .process_group(0);
        let program = cmd.get_program().to_string_lossy().into_owned();
        let mut children = self.shared.children();
        // Checked again under the lock: the watcher kills what is registered, nothing later.
        self.check()?;
        let mut child = cmd
            .spawn()
            .map_err(io(format!("cannot start {name} ({program})")))?;
        let stdout = child.stdout.take();
        let pid = child.id();
        children.insert(pid, child);
        Ok((
            Proc {
                name: name.to_owned(),
                pid,
                stderr: stderr.to_owned(),
            },
            stdout,
        ))
    }

    /// `Some(status)` if the process has exited. It is not reaped here: it stays a zombie until
    /// the supervisor waits for it (`wait`, `kill`, `terminate`, drop), so its pid — and the
    /// process group it leads — cannot be given to another process meanwhile, and the SIGKILL
    /// those send to its group can never reach a stranger that got the number.
    pub fn exited(&self, pid: u32) -> Option<ExitStatus> {
        if !self.shared.children().contains_key(&pid) {
            return None;
        }
        exit_status_unreaped(pid)
    }

    /// Waits for a process that is expected to exit by itself (the client).
    pub fn wait(&self, pid: u32) -> Result<ExitStatus, LabError> {
        loop {
            if let Some(status) = self.exited(pid) {
                if let Some(mut c) = self.shared.children().remove(&pid) {
                    let _ = c.wait(); // reaps the zombie: it has exited, so this returns at once
                }
                return Ok(status);
            }
            if !self.shared.children().contains_key(&pid) {
                self.check()?;
                return Err(LabError::Failed(format!("process {pid} is gone")));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills and reaps one process.
    pub fn kill(&self, pid: u32) {
        let child = self.shared.children().remove(&pid);
        if let Some(mut c) = child {
            kill_group(pid, &mut c);
            let _ = c.wait();
        }
    }

    /// Waits until `proc` accepts TCP connections on `addr`; its stderr if it dies first.
    pub fn wait_listening(&self, proc: &Proc, addr: SocketAddr) -> Result<(), LabError> {
        let start = Instant::now();
        loop {
            self.check()?;
            if let Some(status) = self.exited(proc.pid) {
                return Err(LabError::Start {
                    name: proc.name.clone(),
                    why: format!("it exited ({status}) before listening on {addr}"),
                    stderr: proc.stderr_tail(40),
                });
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(LabError::Start {
                    name: proc.name.clone(),
                    why: format!("it did not listen on {addr} within {START_TIMEOUT:?}"),
                    stderr: proc.stderr_tail(40),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The exit status of a child that has exited, leaving it unreaped (`waitid` with `WNOWAIT`);
/// `None` while it runs.
fn exit_status_unreaped(pid: u32) -> Option<ExitStatus> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    use std::os::unix::process::ExitStatusExt;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    // The raw wait status std decodes: the code in bits 8..16, or the signal (+ core dump bit).
    match waitid(Id::Pid(pid), flags).ok()? {
        WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
        WaitStatus::Signaled(_, signal, core) => Some(ExitStatus::from_raw(
            signal as i32 | if core { 0x80 } else { 0 },
        )),
        _ => None,
    }
}

/// SIGKILL to the child's process group (it leads one: `process_group(0)`), then to the child.
fn kill_group(pid: u32, child: &mut Child) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill();
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.shared.kill_all();
    }
}

/// The last `lines` lines of a file (a child's stderr), or nothing.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Looks for `program` on PATH, then in the sbin directories daemons live in.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processes::ports::hold;
    use crate::processes::procfs::{cpu_ticks, stat_fields, tree};

    #[test]
    fn a_child_that_dies_is_reported_with_its_stderr() {
        let sup = Supervisor::new("the test").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'no such port' >&2; exit 3"]);
        let (p, _) = sup
            .spawn("broken", cmd, &dir.path().join("e"), false)
            .unwrap();
        let held = hold(1).unwrap();
        let addr = held.addrs()[0];
        let err = sup.wait_listening(&p, addr).unwrap_err().to_string();
        assert!(err.contains("broken did not start"), "{err}");
        assert!(err.contains("no such port"), "{err}");
    }

    #[test]
    fn killing_a_child_kills_its_own_children_too() {
        let dir = tempfile::tempdir().unwrap();
        let sup = Supervisor::new("the test").unwrap();
        let mut cmd = Command::new("sh");
        // A parent that forks a worker, as nginx's master does.
        cmd.args(["-c", "sleep 60 & wait"]);
        let (p, _) = sup
            .spawn("master", cmd, &dir.path().join("e"), false)
            .unwrap();
        let start = Instant::now();
        let worker = loop {
            if let Some(w) = tree(p.pid).get(1).copied() {
                break w;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no worker");
            std::thread::sleep(Duration::from_millis(5));
        };
        sup.kill(p.pid);
        let start = Instant::now();
        // The orphaned worker is reaped by init; until then it may be a zombie.
        while stat_fields(worker).is_some_and(|f| f[0] != "Z") {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the worker survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A child that exits is seen as exited with its status, but stays a zombie (its pid
    /// reserved) until the supervisor reaps it.
    #[test]
    fn an_exited_child_keeps_its_pid_until_reaped() {
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let sup = Supervisor::quiet();
        let start = |script: &str| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", script]);
            sup.spawn("sh", cmd, &dir.path().join("e"), false)
                .unwrap()
                .0
                .pid
        };
        let (code, killed) = (start("exit 3"), start("kill -9 $$"));
        let until_exited = |pid| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = sup.exited(pid) {
                    return status;
                }
                assert!(Instant::now() < deadline, "{pid} never exited");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        assert_eq!(until_exited(code).code(), Some(3));
        assert_eq!(until_exited(killed).signal(), Some(9));
        // Asked twice: still there, as a zombie, so the number is not reused.
        assert_eq!(sup.exited(code).and_then(|s| s.code()), Some(3));
        let state = |pid: u32| stat_fields(pid).and_then(|f| f.first().cloned());
        assert_eq!(state(code).as_deref(), Some("Z"));
        sup.kill(code);
        assert_eq!(state(code), None);
        assert_eq!(sup.wait(killed).unwrap().signal(), Some(9));
        assert_eq!(state(killed), None);
    }

    #[test]
    fn dropping_the_supervisor_kills_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let pid = {
            let sup = Supervisor::new("the test").unwrap();
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            let (p, _) = sup
                .spawn("sleep", cmd, &dir.path().join("e"), false)
                .unwrap();
            assert!(cpu_ticks(p.pid).is_some());
            p.pid
        };
        // Reaped: no /proc entry left (not even a zombie).
        assert!(cpu_ticks(pid).is_none());
    }
}
