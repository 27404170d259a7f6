//! A service's own command (`services.<name>.run`) in `hopwise up`: one process per copy,
//! started once the copy's proxy is ready, behind it like a sample app (docs/up.md, "Your own
//! command"). [`launch`] is pure: what runs, where, with which environment — the port it
//! listens on (`PORT`, `HOPWISE_APP`, `{port}`) and where each upstream is
//! (`HOPWISE_UPSTREAM_<NAME>`: the proxy's local port, or captured, the callee's name).
//! [`command`] builds the process: `hopwise exec -- PROGRAM ARGS…`, which ties itself to `up`
//! (`PR_SET_PDEATHSIG`, as every child of `up` does) and then becomes the program ([`exec`]),
//! in the copy's namespace when it is captured (the same [`CapturedCopy`] as a captured
//! sample's). [`until_signal`] reports a command that exits while `up` runs.
//!
//! Who starts, waits for and stops it is `run.rs`'s; this module adds no supervision of its own.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command};
use std::time::Duration;

use hopwise_model::run::{self, Run};

use super::captured;
use super::plan::PlannedCopy;
use crate::capture::CapturedCopy;
use crate::error::{LabError, io};
use crate::processes::parent::PARENT_ENV;
use crate::processes::supervisor::{Proc, Supervisor};

/// `hopwise exec -- PROGRAM ARGS…` (hidden; started by `hopwise up`).
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Becomes `args.command` (execvp: the pid, the process group and the parent-death signal the
/// binary asked for at start stay). Returns only if that fails.
pub fn exec(args: &ExecArgs) -> LabError {
    let Some((program, rest)) = args.command.split_first() else {
        return LabError::Failed("no command to run".into());
    };
    // The tie is this process's: the command's own children are not `up`'s.
    let source = Command::new(program)
        .args(rest)
        .env_remove(PARENT_ENV)
        .exec();
    LabError::Io {
        what: format!("cannot start `{}`", args.command.join(" ")),
        source,
    }
}

/// One copy's command, planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The program: as written, or a relative path with a `/` made the mesh file's.
    pub program: String,
    /// Its arguments, `{port}` replaced.
    pub args: Vec<String>,
    /// The environment added, the file's `env` first.
    pub env: Vec<(String, String)>,
    /// Where it runs: the mesh file's directory.
    pub dir: PathBuf,
}

/// The command of copy `c` (planned by [`super::plan`], captured or not) of a service whose
/// mesh file is in `dir`.
pub fn launch(run: &Run, dir: &Path, c: &PlannedCopy) -> Launch {
    // A captured app listens on its namespace's loopback; the host reaches it on the link.
    let listen = if c.captured {
        captured::inside(c.app)
    } else {
        c.app
    };
    let port = listen.port().to_string();
    let (program, rest) = run
        .argv
        .split_first()
        .map_or(("", &[][..]), |(p, r)| (p, r));
    let program = if program.contains('/') && Path::new(program).is_relative() {
        dir.join(program).display().to_string()
    } else {
        program.to_owned()
    };
    let mut env = run.env.clone();
    env.push((run::PORT.to_owned(), port.clone()));
    env.push((run::APP.to_owned(), listen.to_string()));
    for (to, at) in upstreams(c) {
        env.push((run::upstream_var(&to), at));
    }
    Launch {
        program,
        args: rest
            .iter()
            .map(|a| a.replace(run::PORT_ARG, &port))
            .collect(),
        env,
        dir: dir.to_owned(),
    }
}

/// Where copy `c`'s command reaches each callee: the proxy's local port, or (captured) the
/// callee's name, which its namespace resolves and its rules take to the proxy.
fn upstreams(c: &PlannedCopy) -> Vec<(String, String)> {
    let ports = c.proxy.iter().flat_map(|p| p.upstreams.iter());
    ports
        .map(|(to, at)| (to.clone(), at.to_string()))
        .chain(c.by_name.iter().map(|to| (to.clone(), to.clone())))
        .collect()
}

/// The process for `l`: `hopwise exec -- …` (`exe` is this binary), inside `netns` if given.
pub fn command(exe: &Path, l: &Launch, netns: Option<&CapturedCopy>) -> Command {
    let mut cmd = match netns {
        Some(n) => {
            let mut c = n.command(exe);
            c.arg("exec");
            c
        }
        None => {
            let mut c = Command::new(exe);
            c.arg("exec");
            c
        }
    };
    cmd.arg("--")
        .arg(&l.program)
        .args(&l.args)
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&l.dir);
    cmd
}

/// Copies a command's stdout to `log` (its stderr goes to its own log, as a sample's does), so
/// what it prints is kept and it never blocks on a full pipe.
pub fn keep_stdout(out: ChildStdout, log: &Path) -> Result<(), LabError> {
    let mut file =
        std::fs::File::create(log).map_err(io(format!("cannot create {}", log.display())))?;
    std::thread::spawn(move || {
        let mut out = out;
        let _ = std::io::copy(&mut out, &mut file);
    });
    Ok(())
}

/// What `up` says when a command exits while the mesh runs.
pub fn exited_line(p: &Proc, status: std::process::ExitStatus) -> String {
    format!(
        "hopwise up: {} exited ({status}); the rest keeps running. Its output: {} (and .stdout)",
        p.name,
        p.stderr.display()
    )
}

/// Resolves on Ctrl-C or SIGTERM, as [`super::signals`]; meanwhile says once of each of
/// `commands` that it exited (it is not restarted: `up` is for trying a mesh, not for
/// keeping one up).
pub async fn until_signal(sup: &Supervisor, commands: &[Proc]) {
    let watch = async {
        let mut told: Vec<u32> = Vec::new();
        loop {
            for p in commands {
                if told.contains(&p.pid) {
                    continue;
                }
                if let Some(status) = sup.exited(p.pid) {
                    crate::progress(&exited_line(p, status));
                    told.push(p.pid);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        () = super::signals() => {}
        _ = watch => {}
    }
}

#[cfg(test)]
mod tests;
