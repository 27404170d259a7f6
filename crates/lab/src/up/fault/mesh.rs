//! `hopwise fault SERVICE …` for a service whose app is the user's own (no sample, no knobs):
//! the fault goes into the mesh file, as `services.<name>.fault` (docs/config.md), which every
//! copy's inbound proxy injects — `--error-rate` an abort (503, gRPC `unavailable`) for that
//! share, `--latency` a delay for every request, `--only-header` limiting both to requests that
//! carry a header, `--clear` removing it. The run's control plane checks and applies the file
//! as `hopwise control apply` does; once applied, the run's own copy of the file
//! (`RUN/mesh.yaml`, which it watches) is written too, so the two agree.

use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::super::FaultArgs;
use super::super::samples::SamplesFile;
use crate::error::{LabError, io};

/// A flag only a sample's knobs take, refused for the user's own app, saying so.
fn refuse_knobs(args: &FaultArgs) -> Result<(), LabError> {
    let knobs_only = [
        (args.down || args.no_down, "--down"),
        (args.hang || args.no_hang, "--hang"),
        (args.fail_first.is_some(), "--fail-first"),
        (args.lose_response || args.keep_response, "--lose-response"),
        (args.copy.is_some(), "--copy"),
    ];
    if let Some((_, flag)) = knobs_only.iter().find(|(given, _)| *given) {
        return Err(LabError::Failed(format!(
            "`{}` is your own app: its proxies inject --error-rate and --latency (for every copy, in the mesh file), not {flag}, which only a sample's knobs do",
            args.service
        )));
    }
    Ok(())
}

/// The `fault` block `args` asks for; `None`: `--clear` alone (no fault).
pub fn block(args: &FaultArgs, grpc: bool) -> Result<Option<Value>, LabError> {
    refuse_knobs(args)?;
    let mut fault = Map::new();
    if let Some(rate) = args.error_rate {
        let percent = (rate * 100.0).round();
        if !(0.0..=1.0).contains(&rate) || (percent - rate * 100.0).abs() > 1e-9 {
            return Err(LabError::Failed(format!(
                "--error-rate {rate}: a whole percent between 0.0 and 1.0 for a mesh fault (20 % is 0.2)"
            )));
        }
        let answer = match grpc {
            true => json!({ "grpc": "unavailable", "percent": percent as u8 }),
            false => json!({ "status": 503, "percent": percent as u8 }),
        };
        fault.insert("abort".into(), answer);
    }
    if let Some(latency) = args.latency {
        let ms = latency.get().as_millis();
        fault.insert("delay".into(), json!({ "time": format!("{ms}ms") }));
    }
    if let Some(header) = &args.only_header {
        let (name, value) = match header.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (header.as_str(), None),
        };
        let mut h = Map::new();
        h.insert("name".into(), json!(name));
        if let Some(v) = value {
            h.insert("value".into(), json!(v));
        }
        fault.insert("header".into(), Value::Object(h));
    }
    match (fault.is_empty(), args.clear) {
        (true, true) => Ok(None),
        (true, false) => Err(LabError::Failed(
            "nothing to change: give --error-rate, --latency (with --only-header), or --clear"
                .to_owned(),
        )),
        (false, _) => Ok(Some(Value::Object(fault))),
    }
}

/// The mesh file `text` with `service`'s `fault` set to `fault` (`None`: removed), every other
/// key where it was (services' default addresses follow the file's order), as JSON text, which
/// YAML reads as it is.
pub fn with_fault(text: &str, service: &str, fault: Option<Value>) -> Result<String, LabError> {
    let tree = hopwise_model::yaml::parse(text).map_err(|d| LabError::Failed(d.to_string()))?;
    let json = hopwise_model::yaml::json::write(&tree, &|_| Vec::new());
    let mut file: Value = serde_json::from_str(&json)
        .map_err(|e| LabError::Failed(format!("the mesh file as JSON: {e}")))?;
    let Some(Value::Object(entry)) = file.pointer_mut(&format!("/services/{service}")) else {
        return Err(LabError::Failed(format!(
            "`{service}` is not a service of the mesh file in force"
        )));
    };
    match fault {
        Some(f) => {
            entry.insert("fault".into(), f);
        }
        None => {
            entry.shift_remove("fault");
        }
    }
    serde_json::to_string(&file).map_err(|e| LabError::Failed(e.to_string()))
}

/// Applies the fault to the run in `run` (its control plane at `samples.control`), prints what
/// is in force for the service now.
pub fn run(
    args: &FaultArgs,
    run: &Path,
    samples: &SamplesFile,
    out: &mut dyn Write,
) -> Result<(), LabError> {
    refuse_knobs(args)?;
    let Some(control) = samples.control else {
        return Err(LabError::Failed(format!(
            "this run's samples file does not say where its control plane listens (an older `hopwise up`): apply `services.{}.fault` with `hopwise control apply`",
            args.service
        )));
    };
    let file = run.join("mesh.yaml");
    let text = std::fs::read_to_string(&file).map_err(io(format!(
        "cannot read the run's mesh file {}",
        file.display()
    )))?;
    let mesh = hopwise_model::Mesh::from_yaml(&text)
        .map_err(|d| LabError::Failed(d.render(&file.display().to_string())))?;
    let grpc = (mesh.services.get(&args.service))
        .is_some_and(|s| s.protocol == hopwise_model::Protocol::Grpc);
    let fault = block(args, grpc)?;
    let shown = fault.as_ref().map_or("none".to_owned(), Value::to_string);
    let new = with_fault(&text, &args.service, fault)?;
    let state = run.join("state");
    let server = hopwise_control::client::Server::from_state(&control.to_string(), &state)
        .map_err(|e| LabError::Failed(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("cannot start the runtime"))?;
    let name = format!("hopwise fault {}", args.service);
    let applied = rt
        .block_on(hopwise_control::client::apply(&server, &new, &name))
        .map_err(|e| LabError::Failed(format!("the run's control plane at {control}: {e}")))?;
    if !applied.applied {
        return Err(LabError::Failed(format!(
            "the control plane refused the fault, nothing changed:\n{}",
            hopwise_control::client::render_apply(&applied).trim_end()
        )));
    }
    // The watched copy agrees with what is in force (else its next look would undo it);
    // renamed into place, so the watch never reads half of it.
    let part = run.join("mesh.yaml.part");
    std::fs::write(&part, &new).map_err(io(format!("cannot write {}", part.display())))?;
    std::fs::rename(&part, &file).map_err(io(format!("cannot replace {}", file.display())))?;
    let _ = writeln!(
        out,
        "{}: fault {shown} in force on every copy's proxy (config version {})",
        args.service, applied.config_version
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> FaultArgs {
        super::super::tests::parse(line)
    }

    #[test]
    fn flags_become_the_files_fault_block() {
        let a = args(&["api", "--error-rate", "0.25", "--latency", "1.5s"]);
        assert_eq!(
            block(&a, false).unwrap(),
            Some(json!({"abort": {"status": 503, "percent": 25}, "delay": {"time": "1500ms"}}))
        );
        let a = args(&["api", "--error-rate", "1", "--only-header", "x-test=on"]);
        assert_eq!(
            block(&a, true).unwrap(),
            Some(json!({"abort": {"grpc": "unavailable", "percent": 100},
                        "header": {"name": "x-test", "value": "on"}}))
        );
        assert_eq!(block(&args(&["api", "--clear"]), false).unwrap(), None);
        for bad in [
            &["api", "--error-rate", "0.005"][..],
            &["api", "--copy", "1", "--latency", "1s"],
        ] {
            assert!(block(&args(bad), false).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_fault_goes_in_and_out_with_every_other_key_in_its_place() {
        let text = "mesh: { name: m }\nservices:\n  b: {}\n  a: { calls: { b: {} } }\n";
        let with = with_fault(text, "b", Some(json!({"delay": {"time": "1s"}}))).unwrap();
        assert_eq!(
            with,
            r#"{"mesh":{"name":"m"},"services":{"b":{"fault":{"delay":{"time":"1s"}}},"a":{"calls":{"b":{}}}}}"#
        );
        let mesh = hopwise_model::Mesh::from_yaml(&with).unwrap();
        assert!(mesh.services["b"].fault.is_some());
        let without = with_fault(&with, "b", None).unwrap();
        assert!(
            hopwise_model::Mesh::from_yaml(&without).unwrap().services["b"]
                .fault
                .is_none()
        );
        assert!(with_fault(text, "ghost", None).is_err());
    }
}
