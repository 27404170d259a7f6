//! `hopwise fault SERVICE …`: finds a running `up`'s knobs in its `samples.json` and changes
//! them on every copy of the service (or one), printing each copy's new state. A service whose
//! app is the user's own has no knobs: its fault goes into the mesh file (`mesh.rs`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Request, header};
use http_body_util::Full;
use serde_json::{Map, Value, json};

use super::FaultArgs;
use super::samples::{self, SamplesFile};
use crate::error::{LabError, io};
use crate::samples::knobs::Fault;
use crate::samples::wire;

mod mesh;

/// The partial JSON object `args` asks for (`None`: nothing but maybe `--clear`).
pub fn change(args: &FaultArgs) -> Result<Option<Value>, LabError> {
    let mut m = Map::new();
    if let Some(r) = args.error_rate {
        if !(0.0..=1.0).contains(&r) {
            return Err(LabError::Failed(format!(
                "--error-rate {r}: a share between 0.0 and 1.0 (20 % is 0.2)"
            )));
        }
        m.insert("error_rate".into(), json!(r));
    }
    if let Some(l) = args.latency {
        m.insert("latency_ms".into(), json!(l.get().as_millis() as u64));
    }
    if let Some(n) = args.fail_first {
        m.insert("fail_first".into(), json!(n));
    }
    for (on, off, name) in [
        (args.down, args.no_down, "down"),
        (args.hang, args.no_hang, "hang"),
        (args.lose_response, args.keep_response, "lose_response"),
    ] {
        if on {
            m.insert(name.into(), json!(true));
        } else if off {
            m.insert(name.into(), json!(false));
        }
    }
    Ok((!m.is_empty()).then_some(Value::Object(m)))
}

/// The run directory `--run` names (a directory, or a mesh file: `./.hopwise/<its name>`), or
/// the only one under `./.hopwise/`.
pub(crate) fn find_run(run: Option<&Path>) -> Result<PathBuf, LabError> {
    let cwd = std::env::current_dir().map_err(io("cannot read the current directory"))?;
    let runs = cwd.join(".hopwise");
    match run {
        Some(p) if p.is_dir() => Ok(p.to_owned()),
        Some(p) if p.is_file() => {
            let text = std::fs::read_to_string(p)
                .map_err(io(format!("cannot read the mesh file {}", p.display())))?;
            let mesh = hopwise_model::Mesh::from_yaml(&text)
                .map_err(|d| LabError::Failed(d.render(&p.display().to_string())))?;
            Ok(runs.join(mesh.name))
        }
        Some(p) => Err(LabError::Failed(format!(
            "--run {}: no such directory or mesh file",
            p.display()
        ))),
        None => {
            let found: Vec<PathBuf> = std::fs::read_dir(&runs)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.join(samples::FILE).is_file() && p.join("up.pid").is_file())
                        .collect()
                })
                .unwrap_or_default();
            match found.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(LabError::Failed(format!(
                    "no running `hopwise up` found under {} (start one, or say where with --run DIR|FILE)",
                    runs.display()
                ))),
                many => Err(LabError::Failed(format!(
                    "{} runs under {}: say which with --run ({})",
                    many.len(),
                    runs.display(),
                    many.iter()
                        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
    }
}

pub(crate) fn read_samples(run: &Path) -> Result<SamplesFile, LabError> {
    let path = run.join(samples::FILE);
    if !run.join("up.pid").is_file() {
        return Err(LabError::Failed(format!(
            "no running `hopwise up` in {} (its up.pid is gone: it has stopped)",
            run.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(io(format!(
        "no running `hopwise up` in {}: cannot read {}",
        run.display(),
        path.display()
    )))?;
    serde_json::from_str(&text)
        .map_err(|e| LabError::Failed(format!("{} is not a samples file: {e}", path.display())))
}

/// Runs `hopwise fault …`: the new state of each copy goes to `out`.
pub fn run(args: &FaultArgs, out: &mut dyn Write) -> Result<(), LabError> {
    let change = change(args)?;
    if change.is_none() && !args.clear {
        return Err(LabError::Failed(
            "nothing to change: give --error-rate, --latency, --down, --hang, --fail-first, --lose-response (or their --no-… forms), or --clear".to_owned(),
        ));
    }
    let run = find_run(args.run.as_deref())?;
    let file = read_samples(&run)?;
    let Some(svc) = file.services.get(&args.service) else {
        return Err(LabError::Failed(format!(
            "`{}` is not a service of this run (services: {})",
            args.service,
            file.services.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    };
    if svc.sample.is_none() {
        return mesh::run(args, &run, &file, out);
    }
    if args.only_header.is_some() {
        return Err(LabError::Failed(format!(
            "--only-header is for your own app's mesh fault; `{}`'s knobs fail requests whatever they carry",
            args.service
        )));
    }
    let copies: Vec<_> = svc
        .copies
        .iter()
        .filter(|c| args.copy.is_none_or(|n| c.copy == n))
        .collect();
    if copies.is_empty() {
        return Err(LabError::Failed(format!(
            "`{}` has no copy {} (copies: 0–{})",
            args.service,
            args.copy.unwrap_or(0),
            svc.copies.len().saturating_sub(1)
        )));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start the runtime"))?;
    for c in copies {
        let Some(knobs) = c.knobs else { continue };
        let state = rt.block_on(async {
            if args.clear {
                post(knobs, "/fault/clear", "{}").await?;
            }
            match &change {
                Some(v) => post(knobs, "/fault", &v.to_string()).await,
                None => get(knobs).await,
            }
        })?;
        let _ = writeln!(
            out,
            "{} copy {}: {}",
            args.service,
            c.copy,
            serde_json::to_string(&state).unwrap_or_default()
        );
    }
    Ok(())
}

async fn post(knobs: SocketAddr, path: &str, body: &str) -> Result<Fault, LabError> {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header(header::HOST, knobs.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| LabError::Failed(e.to_string()))?;
    answer(knobs, wire::send_h1(knobs, req).await)
}

async fn get(knobs: SocketAddr) -> Result<Fault, LabError> {
    answer(knobs, wire::get(knobs, "/fault").await)
}

fn answer(knobs: SocketAddr, r: Result<wire::Reply, String>) -> Result<Fault, LabError> {
    let r = r.map_err(|e| {
        LabError::Failed(format!(
            "the knobs at {knobs} did not answer ({e}); is `hopwise up` still running?"
        ))
    })?;
    if r.status != 200 {
        return Err(LabError::Failed(format!(
            "the knobs at {knobs} refused: {}",
            r.text().trim()
        )));
    }
    serde_json::from_slice(&r.body)
        .map_err(|e| LabError::Failed(format!("the knobs at {knobs} answered {}: {e}", r.text())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: FaultArgs,
    }

    /// `hopwise fault LINE…`'s arguments (`mesh.rs`'s tests too).
    pub(super) fn parse(line: &[&str]) -> FaultArgs {
        let mut all = vec!["fault"];
        all.extend(line);
        Cli::parse_from(all).args
    }

    #[test]
    fn options_become_a_partial_object() {
        let a = parse(&[
            "pricing",
            "--copy",
            "0",
            "--down",
            "--latency",
            "200ms",
            "--fail-first",
            "5",
        ]);
        assert_eq!(a.copy, Some(0));
        assert_eq!(
            change(&a).unwrap(),
            Some(json!({"latency_ms": 200, "fail_first": 5, "down": true}))
        );
        let b = parse(&[
            "inventory",
            "--no-down",
            "--keep-response",
            "--error-rate",
            "0.25",
        ]);
        assert_eq!(
            change(&b).unwrap(),
            Some(json!({"error_rate": 0.25, "down": false, "lose_response": false}))
        );
        assert_eq!(change(&parse(&["x", "--clear"])).unwrap(), None);
        assert!(change(&parse(&["x", "--error-rate", "2"])).is_err());
    }
}
