//! The record of each captured run, `<state>/runs/<id>.json` (default state `/run/hopwise`,
//! which the machine empties at boot), written before anything is made: who runs it (pid and
//! the start time `/proc` gives it, so a reused pid is never taken for it) and its proxy. The
//! next `hopwise run` or `hopwise up` sweeps the records whose run is gone: kills its proxy if
//! that very process still lives, removes what its id names ([`super::netns::remove`]), and
//! the record. A record whose run is alive is left alone; nothing without a record is touched.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::netns::{Tools, remove};
use super::plan::Names;
use crate::error::{LabError, io};
use crate::processes::procfs::stat_fields;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub service: String,
    pub copy: usize,
    /// The `hopwise run` process, and its start time (`/proc/PID/stat`, clock ticks).
    pub pid: u32,
    pub started: u64,
    /// Its proxy, once started.
    pub proxy: Option<(u32, u64)>,
}

/// `/proc/PID/stat`'s start time: with the pid, it names one process for the machine's life.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

fn alive(pid: u32, started: u64) -> bool {
    start_time(pid) == Some(started)
}

/// Has the process `pid` started at `started` exited? A zombie has: its sockets are closed,
/// whether or not anyone reaps it.
fn exited(pid: u32, started: u64) -> bool {
    let Some(f) = stat_fields(pid) else {
        return true;
    };
    let start = f.get(19).and_then(|t| t.parse::<u64>().ok());
    start != Some(started) || matches!(f.first().map(String::as_str), Some("Z" | "X"))
}

fn path(state: &Path, id: &str) -> PathBuf {
    state.join("runs").join(format!("{id}.json"))
}

/// Writes `r` whole or not at all (a temporary file renamed over the record): a run killed
/// while it writes must not leave a half record, which no sweep could read and so none would
/// ever remove what it names.
pub fn write(state: &Path, r: &Record) -> Result<(), LabError> {
    let dir = state.join("runs");
    // Root's alone: the records and the proxies' logs name every run on the machine.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io(format!("cannot create {}", dir.display())))?;
    let p = path(state, &r.id);
    let text = serde_json::to_string_pretty(r)
        .map_err(|e| LabError::Failed(format!("cannot render {}: {e}", p.display())))?;
    let part = p.with_extension("json.part");
    std::fs::write(&part, text).map_err(io(format!("cannot write {}", part.display())))?;
    std::fs::rename(&part, &p).map_err(io(format!("cannot write {}", p.display())))
}

/// Removes run `id`'s record and its proxy's log (the proxy has stopped: its last lines were
/// read for any error already).
pub fn forget(state: &Path, id: &str) {
    let _ = std::fs::remove_file(state.join("runs").join(format!("{id}.proxy.stderr")));
    let _ = std::fs::remove_file(path(state, id));
}

/// Removes what every run recorded under `state` that is no longer alive left behind; the ids
/// swept. Records that do not read, or whose file name is not a run id, are left alone.
pub fn sweep(state: &Path, tools: &Tools) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state.join("runs")) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for e in entries.flatten() {
        let file = e.path();
        let Some(id) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let Some(names) = Names::of(id) else { continue };
        let Some(r) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<Record>(&t).ok())
            .filter(|r| r.id == id)
        else {
            continue;
        };
        if alive(r.pid, r.started) {
            continue;
        }
        if let Some((pid, started)) = r.proxy
            && alive(pid, started)
            && let Ok(p) = i32::try_from(pid)
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
            // A kill is delivered, not finished: until the proxy is gone its ports are still
            // bound, and the run that sweeps is about to bind the same ones.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !exited(pid, started) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        remove(&names, tools);
        forget(state, id);
        swept.push(id.to_owned());
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_is_alive_by_it() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert!(alive(me, t));
        assert!(!alive(me, t + 1), "another start time is another process");
        assert_eq!(start_time(u32::MAX), None);
    }

    /// A killed process whose parent has not reaped it has exited (its ports are free).
    #[test]
    fn a_killed_unreaped_child_has_exited_and_a_running_one_has_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        let t = start_time(pid).unwrap();
        assert!(!exited(pid, t));
        assert!(exited(pid, t + 1), "another start time is another process");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !exited(pid, t) {
            assert!(
                std::time::Instant::now() < deadline,
                "still running after SIGKILL"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(alive(pid, t), "a zombie until reaped");
        child.wait().unwrap();
        assert!(exited(pid, t));
    }

    #[test]
    fn a_live_run_is_never_swept_and_a_foreign_file_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let r = Record {
            id: "0000beef".into(),
            service: "web".into(),
            copy: 0,
            pid: me,
            started: start_time(me).unwrap(),
            proxy: None,
        };
        write(dir.path(), &r).unwrap();
        std::fs::write(dir.path().join("runs/not-an-id.json"), "{}").unwrap();
        let tools = Tools {
            ip: "/nonexistent/ip".into(),
            rules: crate::capture::netns::Rules::Nft("/nonexistent/nft".into()),
        };
        assert!(sweep(dir.path(), &tools).is_empty());
        assert!(path(dir.path(), "0000beef").exists());
        assert!(dir.path().join("runs/not-an-id.json").exists());
    }
}
