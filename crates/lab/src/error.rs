//! `LabError`: why a benchmark, a demo, `hopwise up` or `hopwise fault` could not do its job.
//! One type for the whole lab, because the jobs fail the same ways — an I/O step, a child that
//! did not start (with its stderr), a run that went wrong, Ctrl-C — and share the code that
//! fails them (`processes`, `samples`). The few job-specific variants (`Mesh`, `Client`, `Call`)
//! each say whose they are. The binary prints it with its sources.

use hopwise_control::client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{name} did not start: {why}{}", stderr_block(.stderr))]
    Start {
        name: String,
        why: String,
        stderr: String,
    },
    #[error("{0}")]
    Failed(String),
    /// Ctrl-C or SIGTERM; `who` is the job (`the bench`, `the demo`, `` `up` ``).
    #[error("interrupted; every process {who} started has been stopped")]
    Interrupted { who: &'static str },
    /// A demo wrote a mesh file that does not read (a bug in the demo).
    #[error("the mesh file the demo wrote was refused (a bug in the demo):\n{0}")]
    Mesh(String),
    /// `control bench`: the command line's client to the control plane.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// `control bench`: a call the control plane refused.
    #[error("{what} failed: {message}")]
    Call { what: &'static str, message: String },
}

/// What a child wrote to stderr, as the tail of an error message.
pub(crate) fn stderr_block(stderr: &str) -> String {
    let s = stderr.trim_end();
    if s.is_empty() {
        " (it wrote nothing to stderr)".to_owned()
    } else {
        format!("\n--- its stderr ---\n{s}\n---")
    }
}

/// `map_err` helper: an I/O error with what we were doing.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}
