//! The run directory of one `hopwise up`, and the processes of a run that crashed.
//!
//! The run directory is `./.hopwise/<mesh name>/` (under the current directory):
//!
//! ```text
//! up.pid          the running `up`
//! pids            every child's pid, one a line
//! samples.json    what runs where (samples.rs)
//! certs/          the run's CA (the control plane signs with it) and the fee's certificate
//! state/          the control plane's state (tokens/<service>)
//! cache/<s>-<n>/  each proxy's certificate and last snapshot
//! logs/<name>.stderr
//! ```
//!
//! A second `up` refuses while the first is alive; after a crash it kills any process listed
//! in `pids` that is still ours (a pid in a stale file may belong to anyone by now: only a
//! `hopwise` process whose command line names this run directory is), then wipes the directory.
//! (Children die with `up` through [`crate::processes::parent`].)

use std::path::{Path, PathBuf};

use hopwise_model::Mesh;

use crate::error::{LabError, io};

/// `./.hopwise/<mesh name>`.
pub fn run_dir(mesh: &Mesh) -> Result<PathBuf, LabError> {
    let cwd = std::env::current_dir().map_err(io("cannot read the current directory"))?;
    Ok(cwd.join(".hopwise").join(&mesh.name))
}

/// The command line of a live process, split at its NULs.
fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Is `pid` a `hopwise` process started for `run`? (A pid in a stale file may belong to
/// anyone by now.)
fn ours(pid: u32, exe_name: &str, run: &Path) -> bool {
    let Some(args) = cmdline(pid) else {
        return false;
    };
    let run = run.to_string_lossy();
    args.first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy() == exe_name)
        && args.iter().any(|a| a.contains(run.as_ref()))
}

fn exe_name(exe: &Path) -> String {
    exe.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "hopwise".to_owned())
}

/// Refuses a run directory whose `up` is alive; kills what a crashed one left; starts clean.
pub(super) fn prepare(run: &Path, exe: &Path) -> Result<(), LabError> {
    let name = exe_name(exe);
    if let Some(pid) = read_pid(&run.join("up.pid"))
        && pid != std::process::id()
        && cmdline(pid).is_some_and(|a| {
            a.first()
                .and_then(|a| Path::new(a).file_name())
                .is_some_and(|n| n.to_string_lossy() == name)
                && a.iter().any(|x| x == "up")
        })
    {
        return Err(LabError::Failed(format!(
            "hopwise up is already running this mesh (pid {pid}, run directory {}); stop it first (Ctrl-C in its terminal, or kill {pid})",
            run.display()
        )));
    }
    let stale: Vec<u32> = std::fs::read_to_string(run.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for pid in stale {
        if ours(pid, &name, run)
            && let Ok(p) = i32::try_from(pid)
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    if run.exists() {
        std::fs::remove_dir_all(run).map_err(io(format!("cannot clear {}", run.display())))?;
    }
    for d in ["logs", "cache", "certs"] {
        std::fs::create_dir_all(run.join(d))
            .map_err(io(format!("cannot create {}", run.join(d).display())))?;
    }
    write(&run.join("up.pid"), &format!("{}\n", std::process::id()))
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub(super) fn write(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(io(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A process whose command line names `run`, as every child of `up` does.
    fn stand_in(run: &Path) -> std::process::Child {
        // A second command keeps `sh` from replacing itself with `sleep`, which would drop
        // the path.
        sh(&[&format!("sleep 60; exit 0 # {}", run.display())])
    }

    /// `sh -c ARGS…` in its own group, as up's children are (killing the group takes its
    /// `sleep` too), returned once its command line is readable: `spawn` returns while the
    /// kernel is still inside `execve`, when `/proc/<pid>/cmdline` is briefly empty — a state
    /// a long-running `up` or child is never in when a later `up` looks at it.
    fn sh(args: &[&str]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sh")
            .arg("-c")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cmdline(child.id()).is_none_or(|a| a.first().is_none_or(|a| a != "sh")) {
            assert!(std::time::Instant::now() < deadline, "sh never started");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child
    }

    fn kill_group(child: &mut std::process::Child) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
    }

    #[test]
    fn a_stale_run_loses_only_its_own_processes() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join(".hopwise/m");
        std::fs::create_dir_all(&run).unwrap();
        let mut mine = stand_in(&run);
        let mut other = stand_in(&dir.path().join("elsewhere"));
        assert!(ours(mine.id(), "sh", &run));
        assert!(!ours(other.id(), "sh", &run), "another run's process");
        assert!(!ours(mine.id(), "hopwise", &run), "not the program we run");
        std::fs::write(run.join("pids"), format!("{}\n{}\n", mine.id(), other.id())).unwrap();
        std::fs::write(run.join("up.pid"), "999999999\n").unwrap();
        prepare(&run, Path::new("/bin/sh")).unwrap();
        // Killed (its exit is a signal), and the run directory starts afresh.
        let status = mine.wait().unwrap();
        assert!(!status.success());
        assert_eq!(
            other.try_wait().unwrap(),
            None,
            "someone else's process was killed"
        );
        assert!(!run.join("pids").exists());
        assert_eq!(read_pid(&run.join("up.pid")), Some(std::process::id()));
        kill_group(&mut other);
    }

    #[test]
    fn a_live_up_is_not_disturbed() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join(".hopwise/m");
        std::fs::create_dir_all(&run).unwrap();
        // A process named like us with `up` in its command line stands for the running up.
        let mut live = sh(&["sleep 60; exit 0", "up"]);
        std::fs::write(run.join("up.pid"), format!("{}\n", live.id())).unwrap();
        let err = prepare(&run, Path::new("/bin/sh")).unwrap_err().to_string();
        assert!(err.contains("already running"), "{err}");
        assert!(run.join("up.pid").exists());
        kill_group(&mut live);
    }
}
