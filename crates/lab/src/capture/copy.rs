//! One captured copy's namespace, made and owned: the piece `hopwise run` and a captured
//! `hopwise up` share. [`CapturedCopy::make`] records the run first (so a crash half-way is
//! still swept), then plans and builds the namespace, its link, hosts file and rules; the
//! caller starts the copy's proxy with [`CapturedCopy::proxy_args`] added to its own and
//! records it ([`CapturedCopy::proxy_started`]), and starts the app inside with
//! [`CapturedCopy::command`]. Dropping it removes all of it, the record last. It starts no
//! process itself: how the proxy is configured (a mesh file, or the control plane) is the
//! caller's.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use hopwise_model::Mesh;

use super::netns::{self, Tools};
use super::plan::{self, CAPTURE_PORT, Names, Plan};
use super::record::{self, Record};
use crate::error::LabError;

/// A copy's namespace and everything in it, removed on drop.
#[derive(Debug)]
pub struct CapturedCopy {
    plan: Plan,
    record: Record,
    tools: Tools,
    state: PathBuf,
}

impl CapturedCopy {
    /// Records and builds the namespace of copy `copy` of `service`, its app (if any) on
    /// `app_port` inside it; the record goes under `state`. On an error, what was made is
    /// removed again.
    pub fn make(
        mesh: &Mesh,
        service: &str,
        copy: usize,
        app_port: Option<u16>,
        state: &Path,
        tools: &Tools,
    ) -> Result<CapturedCopy, LabError> {
        let names = free_names()?;
        let plan = plan::plan_app(mesh, service, copy, app_port, names.clone())
            .map_err(|e| LabError::Failed(e.to_string()))?;
        let me = std::process::id();
        let record = Record {
            id: names.id,
            service: service.to_owned(),
            copy,
            pid: me,
            started: record::start_time(me).unwrap_or_default(),
            proxy: None,
        };
        record::write(state, &record)?;
        let made = CapturedCopy {
            plan,
            record,
            tools: tools.clone(),
            state: state.to_owned(),
        };
        netns::build(&made.plan, &made.tools)?;
        Ok(made)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What the copy's proxy needs on its command line besides how it is configured: its
    /// capture listener inside the namespace, and the app as reached from the host's.
    pub fn proxy_args(&self) -> Vec<String> {
        let mut a = vec![
            "--capture".to_owned(),
            format!("127.0.0.1:{CAPTURE_PORT}"),
            "--capture-netns".to_owned(),
            self.plan.names.netns_path(),
        ];
        if let Some(app) = self.plan.app_from_host {
            a.extend(["--app".to_owned(), app.to_string()]);
        }
        a
    }

    /// Records the started proxy, so that a crashed run's sweep stops that very process.
    pub fn proxy_started(&mut self, pid: u32) -> Result<(), LabError> {
        self.record.proxy = record::start_time(pid).map(|t| (pid, t));
        record::write(&self.state, &self.record)
    }

    /// `program` to be run inside the namespace (`ip netns exec`, which also puts the hosts
    /// file over `/etc/hosts`); the caller adds its arguments. It execs in place: the pid is
    /// the program's.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(&self.tools.ip);
        c.args(["netns", "exec", &self.plan.names.netns])
            .arg(program);
        c
    }
}

impl Drop for CapturedCopy {
    fn drop(&mut self) {
        netns::remove(&self.plan.names, &self.tools);
        record::forget(&self.state, &self.plan.names.id);
    }
}

/// A run id whose namespace does not exist yet (8 random hex digits).
fn free_names() -> Result<Names, LabError> {
    (0..8)
        .map(|_| format!("{:08x}", fastrand::u32(..)))
        .filter_map(|id| Names::of(&id))
        .find(|n| !Path::new(&n.netns_path()).exists())
        .ok_or_else(|| LabError::Failed("no free run id".into()))
}
