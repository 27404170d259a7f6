//! `hopwise control --kubernetes` and the `Mesh` resource (`hopwise_kube::mesh_resource`): with
//! no `--config`, the control plane starts on `Mesh/default` (waiting for one when its state
//! holds no mesh file, or for a new generation when the one there is refused, its status saying
//! why), then applies each new generation as `hopwise control apply` applies a file.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hopwise_control::api::PlaneHandle;
use hopwise_control::cli::serve::Serving;
use hopwise_control::cli::{CliError, ControlArgs};
use hopwise_control::plane::{ApiError, Applied, ConfigFile, StartError};
use hopwise_control::review::TokenReviewer;
use hopwise_kube::mesh_resource::{self, Found, NAME, Outcome};

/// How the mesh file read from the resource is named in diagnostics and the plane's status.
const SOURCE: &str = "Mesh/default";
/// How often the API server is asked while waiting for a `Mesh`.
const POLL: Duration = Duration::from_secs(1);

/// Starts the control plane on `Mesh/default`, or on its stored mesh file when there is no
/// `Mesh` yet.
pub fn start(
    args: ControlArgs,
    reviewer: Option<Arc<dyn TokenReviewer>>,
) -> anyhow::Result<Serving> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt
        .block_on(hopwise_kube::discovery::client())
        .context("--kubernetes: no client to read the Mesh resource with")?;
    // The first time, whatever is there (maybe nothing: the state may hold a mesh file).
    let mut wait = Wait::No;
    loop {
        let mesh = rt.block_on(read(&client, wait))?;
        let config = mesh.as_ref().map(|(text, _)| ConfigFile {
            name: SOURCE.to_owned(),
            text: text.clone(),
        });
        let e =
            match hopwise_control::cli::serve::start_with(args.clone(), reviewer.clone(), config) {
                Ok(serving) => return Ok(serving),
                Err(CliError::Start(StartError::NoConfig { location })) => {
                    tracing::warn!(
                        "{location} holds no mesh file and there is no Mesh `{NAME}`: waiting for \
                     one (`hopwise install --mesh MESH.yaml | kubectl apply --server-side -f -`)"
                    );
                    wait = Wait::Any;
                    continue;
                }
                Err(CliError::Start(e)) => e,
                Err(e) => return Err(e.into()),
            };
        // The Mesh's file refused: its status says why, and a new generation is waited for.
        let (Some((_, generation)), Some(outcome)) = (&mesh, refused_at_start(&e)) else {
            return Err(CliError::Start(e).into());
        };
        let generation = *generation;
        tracing::error!("{e}; waiting for a new generation of Mesh `{NAME}`");
        if let Err(e) = rt.block_on(mesh_resource::write_status(
            client.clone(),
            generation,
            &outcome,
        )) {
            tracing::warn!("Mesh `{NAME}`: status not written: {e}");
        }
        wait = Wait::NewerThan(generation);
    }
}

/// What [`read`] waits for.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Nothing: the `Mesh` if there is one.
    No,
    /// A `Mesh`.
    Any,
    /// A `Mesh` of a later generation than this refused one.
    NewerThan(i64),
}

/// The `Mesh`'s text and generation, as `wait` asks.
async fn read(client: &hopwise_kube::Client, wait: Wait) -> anyhow::Result<Option<(String, i64)>> {
    loop {
        let found = mesh_resource::get(client.clone())
            .await
            .with_context(|| format!("--kubernetes: reading Mesh `{NAME}`"))?;
        let read = match &found {
            Some(object) => Some(
                mesh_resource::mesh_text(object)
                    .map_err(|why| anyhow::anyhow!("Mesh `{NAME}`: {why}"))?,
            ),
            None => None,
        };
        match (wait, &read) {
            (Wait::No, _) | (Wait::Any, Some(_)) => return Ok(read),
            (Wait::NewerThan(g), Some((_, now))) if *now > g => return Ok(read),
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// The status for a mesh file refused at start, if that is why the start failed.
fn refused_at_start(e: &StartError) -> Option<Outcome> {
    match e {
        StartError::InvalidConfig {
            rendered, count, ..
        } => {
            let mut o = Outcome::refused("Invalid", format!("{count} problem(s); not applied"));
            o.problems = rendered.lines().map(str::to_owned).collect();
            Some(o)
        }
        StartError::Refused { findings, .. } => {
            let mut o = Outcome::refused(
                "Refused",
                "`hopwise check` finds errors; not applied".to_owned(),
            );
            o.findings = findings.iter().map(found).collect();
            Some(o)
        }
        _ => None,
    }
}

fn found(f: &hopwise_analyze::Finding) -> Found {
    Found {
        severity: f.severity.label().to_owned(),
        code: f.code.to_owned(),
        path: f.path.clone(),
        message: f.message.clone(),
    }
}

/// What applying a generation did, as its status says it.
fn outcome(applied: Result<Applied, ApiError>) -> Outcome {
    let a = match applied {
        Ok(a) => a,
        Err(e) => return Outcome::refused("NotSaved", e.to_string()),
    };
    let reason = match (a.applied, a.unchanged, a.findings.is_empty()) {
        (true, true, _) => "Unchanged",
        (true, false, _) => "Applied",
        (false, _, false) => "Refused",
        (false, _, true) => "Invalid",
    };
    Outcome {
        accepted: a.applied,
        reason: reason.to_owned(),
        message: a.message,
        config_version: a.config_version,
        problems: a.diagnostics,
        findings: a.findings.iter().map(found).collect(),
    }
}

/// `hopwise webhook`'s judge of a `Mesh` (`/validate-mesh`): refused as `hopwise control apply`
/// would refuse its file, with the same words; otherwise admitted with `hopwise check`'s
/// warnings, each with its place ([`hopwise_control::plane::Prepared::admission`]).
pub fn judge(text: &str) -> Result<Vec<String>, String> {
    hopwise_control::plane::prepare(text, SOURCE).admission()
}

/// `hopwise install --mesh FILE`: the `Mesh` resource holding `path`, once it reads and
/// `hopwise check` finds no error in it (as `hopwise control apply` would refuse it).
pub fn print_resource(path: &std::path::Path) -> anyhow::Result<std::process::ExitCode> {
    let name = path.display().to_string();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading mesh file {name}"))?;
    let prepared = hopwise_control::plane::prepare(&text, &name);
    if let Some(why) = prepared.refusal() {
        anyhow::bail!("{name} is refused: {why}");
    }
    let spec = mesh_resource::spec_of(&text, &name).map_err(|e| anyhow::anyhow!(e))?;
    let object = mesh_resource::object(spec);
    #[allow(clippy::print_stdout)] // the binary's output
    {
        println!("{}", serde_json::to_string_pretty(&object)?);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Applies each new generation of `Mesh/default` while the control plane runs.
pub async fn watch(plane: PlaneHandle) {
    let client = match hopwise_kube::discovery::client().await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("--kubernetes: no client for the Mesh resource: {e}");
            return;
        }
    };
    tracing::info!(
        "Mesh `{NAME}`: each new generation is applied as `hopwise control apply` would"
    );
    mesh_resource::watch(client, |text| {
        let plane = plane.clone();
        async move { outcome(plane.apply(text, SOURCE.to_owned()).await) }
    })
    .await;
}
