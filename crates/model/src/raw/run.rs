//! `services.<name>.run` as written: the service's own command, which `hopwise up` starts for
//! each copy (docs/up.md). Its reader, every problem collected with its path; the checks
//! against the rest of the service are `crate::run`'s.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use crate::read::Reader;
use crate::yaml::{Node, Value};

/// `services.<name>.run`: the program and its arguments (no shell), or that with its
/// environment and health path.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawRun {
    /// The program and its arguments, e.g. `[node, loan-thin.mjs]`.
    Argv(#[schemars(length(min = 1))] Vec<String>),
    /// The command with more settings.
    Command(RawRunCommand),
}

/// `services.<name>.run` as a mapping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRunCommand {
    /// The program and its arguments (no shell). It runs in the mesh file's directory; a
    /// program without `/` is looked up on `PATH`.
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// Added to the environment `hopwise up` runs with (`PORT` and `HOPWISE_*` are `up`'s).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// The path its proxy probes (any answer below 500 is healthy); `up` waits for it.
    /// Default: `up` waits for the port to accept, and the proxy probes `/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_path: Option<String>,
}

impl RawRun {
    /// Both forms as the mapping.
    pub fn command(&self) -> RawRunCommand {
        match self {
            RawRun::Argv(argv) => RawRunCommand {
                command: argv.clone(),
                ..RawRunCommand::default()
            },
            RawRun::Command(c) => c.clone(),
        }
    }
}

/// A word of a command or an environment value: a string (a number is written quoted, `"8000"`,
/// as the schema says), with no NUL: no program could take it.
fn word(r: &mut Reader, n: &Node, p: &str) -> Option<String> {
    let text = r.string(n, p)?;
    if text.contains('\0') {
        r.error(p, n.pos, "a NUL byte cannot be passed to a program");
        return None;
    }
    Some(text)
}

/// The program and its arguments: at least the program, and it has a name.
fn argv(r: &mut Reader, n: &Node, p: &str) -> Option<Vec<String>> {
    let words = r.list(n, p, word)?;
    match words.first() {
        None => {
            r.error(
                p,
                n.pos,
                "an empty command: write the program and its arguments, e.g. `[node, app.mjs]`",
            );
            None
        }
        Some(program) if program.trim().is_empty() => {
            r.error(&format!("{p}[0]"), n.pos, "the program's name is empty");
            None
        }
        Some(_) => Some(words),
    }
}

/// `env`: names as a shell would accept them, none of those `up` sets itself.
fn env(r: &mut Reader, n: &Node, p: &str) -> Option<IndexMap<String, String>> {
    let Value::Map(entries) = &n.value else {
        r.error(
            p,
            n.pos,
            format!(
                "expected a mapping of variable names to values, found {}",
                n.value.kind()
            ),
        );
        return None;
    };
    let mut out = IndexMap::new();
    for (k, v) in entries {
        let child = format!("{p}.{}", k.name);
        let mut chars = k.name.chars();
        let shell_name = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !shell_name {
            r.error(
                &child,
                k.pos,
                format!(
                    "`{}` is not a variable name (letters, digits and `_`, not starting with a digit)",
                    k.name
                ),
            );
            continue;
        }
        if k.name == "PORT" || k.name.starts_with("HOPWISE_") {
            r.error(
                &child,
                k.pos,
                format!(
                    "`{}` is set by `hopwise up` for each copy (docs/up.md): choose another name",
                    k.name
                ),
            );
            continue;
        }
        if let Some(value) = word(r, v, &child) {
            out.insert(k.name.clone(), value);
        }
    }
    Some(out)
}

fn health_path(r: &mut Reader, n: &Node, p: &str) -> Option<String> {
    let path = r.string(n, p)?;
    if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        r.error(
            p,
            n.pos,
            format!("`{path}` is not a request path: it starts with `/` and has no spaces"),
        );
        return None;
    }
    Some(path)
}

pub(super) fn read_run(r: &mut Reader, n: &Node, p: &str) -> Option<RawRun> {
    match &n.value {
        Value::Seq(_) => argv(r, n, p).map(RawRun::Argv),
        Value::Map(_) => {
            let mut f = r.fields(n, p)?;
            let command = f.get(r, "command", argv);
            let env = f.get(r, "env", env).unwrap_or_default();
            let health_path = f.get(r, "health_path", health_path);
            f.finish(r);
            let Some(command) = command else {
                // A `command` that was read and found wrong has been reported already.
                let at = format!("{p}.command");
                if !r.diags.iter().any(|d| d.path.starts_with(&at)) {
                    r.error(
                        p,
                        n.pos,
                        "no `command`: write the program and its arguments, e.g. `command: [node, app.mjs]`",
                    );
                }
                return None;
            };
            Some(RawRun::Command(RawRunCommand {
                command,
                env,
                health_path,
            }))
        }
        other => {
            r.error(
                p,
                n.pos,
                format!(
                    "expected the command as a list (`[node, app.mjs]`) or a mapping with `command`, found {}",
                    other.kind()
                ),
            );
            None
        }
    }
}
