//! `hopwise check --from PATH… --calls FILE` and `hopwise convert`: the files read from disk
//! (directories walked for `.yaml`/`.yml`, in name order), handed to `hopwise-convert`, and the
//! result printed or written. Every problem is printed as `file:line:column: object: message`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use hopwise_analyze::Options;
use hopwise_convert::{Flavor, Source};

use crate::{EXIT_BAD_INPUT, EXIT_FINDINGS, Format};

/// Where an existing mesh's configuration is and who calls whom.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// Kubernetes YAML (a file or a directory of them): Istio VirtualServices and
    /// DestinationRules, Linkerd ServiceProfiles, Gateway API HTTPRoutes and GRPCRoutes,
    /// Services; other kinds are listed as skipped. Repeatable.
    #[arg(long = "from", value_name = "PATH")]
    pub from: Vec<PathBuf>,
    /// Who calls whom: one call per line (`frontend -> checkout`, or a chain), `entry SERVICE
    /// timeout=2s`, or a text export of `istio_requests_total` / `response_total`. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub calls: Vec<PathBuf>,
    /// Whose defaults apply to what the files leave out (default: Linkerd's when only Linkerd
    /// objects or annotations are found, else Istio's).
    #[arg(long, value_enum)]
    pub mesh: Option<MeshArg>,
    /// Back-off between retries: Envoy's jittered back-off, or the same 25 ms before every
    /// retry (how the seed's timeout checker counts).
    #[arg(long, value_enum, default_value_t = BackoffArg::Envoy)]
    pub backoff: BackoffArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MeshArg {
    Istio,
    Linkerd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BackoffArg {
    Envoy,
    Fixed,
}

/// Files under `path` (itself if a file), YAML only for directories, in name order.
fn files(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if !path.is_dir() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read the directory {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        let yaml = e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml"));
        if e.is_dir() || yaml {
            files(&e, out)?;
        }
    }
    Ok(())
}

fn read_all(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, String)>> {
    let mut list = Vec::new();
    for p in paths {
        files(p, &mut list)?;
    }
    list.iter()
        .map(|p| {
            let name = p.display().to_string();
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {name}"))
                .map(|text| (name, text))
        })
        .collect()
}

fn sources(v: &[(String, String)]) -> Vec<Source<'_>> {
    v.iter().map(|(n, t)| Source { name: n, text: t }).collect()
}

/// The configuration read and translated, or `None` after printing every problem.
#[allow(clippy::print_stderr)]
fn imported(a: &ImportArgs, done: &str) -> anyhow::Result<Option<hopwise_convert::Imported>> {
    let config = read_all(&a.from)?;
    let calls = read_all(&a.calls)?;
    let name = a
        .from
        .first()
        .and_then(|p| p.file_stem())
        .map_or("imported".to_owned(), |s| s.to_string_lossy().into_owned());
    let opts = hopwise_convert::Options {
        name,
        flavor: a.mesh.map(|m| match m {
            MeshArg::Istio => Flavor::Istio,
            MeshArg::Linkerd => Flavor::Linkerd,
        }),
        fixed_backoff: matches!(a.backoff, BackoffArg::Fixed),
    };
    match hopwise_convert::import(&sources(&config), &sources(&calls), &opts) {
        Ok(i) => Ok(Some(i)),
        Err(p) => {
            eprintln!("{}", p.render());
            eprintln!("hopwise: {} problem(s); nothing was {done}", p.0.len());
            Ok(None)
        }
    }
}

/// `hopwise check --from …`.
#[allow(clippy::print_stdout)]
pub fn check(a: &ImportArgs, format: Format, max_fanout: u64) -> anyhow::Result<ExitCode> {
    let Some(imp) = imported(a, "checked")? else {
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    };
    let opts = Options {
        max_fanout,
        ..Options::default()
    };
    let checked = hopwise_convert::check(&imp, &opts);
    match format {
        Format::Text => print!("{}", checked.text()),
        Format::Json => println!("{}", serde_json::to_string_pretty(&checked)?),
    }
    Ok(if checked.report.has_errors() {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

/// `hopwise convert`: the equivalent hopwise mesh file, to `out` or standard output.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn convert(a: &ImportArgs, out: Option<&Path>) -> anyhow::Result<ExitCode> {
    let Some(imp) = imported(a, "converted")? else {
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    };
    for s in &imp.skipped {
        eprintln!("hopwise convert: skipped {}: {}", s.at, s.why);
    }
    for n in &imp.notes {
        eprintln!("hopwise convert: note: {n}");
    }
    let Some(path) = out else {
        print!("{}", imp.text);
        eprintln!("hopwise convert: give --out FILE to write the fixed file beside it too");
        return Ok(ExitCode::SUCCESS);
    };
    let opts = Options::default();
    let fixed = match hopwise_convert::fixed::write(&imp, &opts) {
        Ok(f) => f,
        Err(p) => {
            eprintln!("{}", p.render());
            eprintln!("hopwise: the fixed file could not be written");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let fixed_path = fixed_beside(path);
    let as_is = hopwise_convert::check(&imp, &opts).report;
    for (p, text) in [(path, &imp.text), (fixed_path.as_path(), &fixed.text)] {
        std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    eprintln!(
        "hopwise convert: wrote {}: the configuration as it is: {}",
        path.display(),
        summary(&as_is)
    );
    eprintln!(
        "hopwise convert: wrote {}: the same with check's {} fix(es) applied: {}",
        fixed_path.display(),
        fixed.fixes.len(),
        summary(&fixed.report)
    );
    for f in &fixed.fixes {
        eprintln!("  fix {}", hopwise_convert::fixed::describe(f));
    }
    Ok(ExitCode::SUCCESS)
}

/// `mesh.yaml` → `mesh.fixed.yaml` in the same directory.
fn fixed_beside(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or("mesh".into(), |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(x) => format!("{stem}.fixed.{}", x.to_string_lossy()),
        None => format!("{stem}.fixed"),
    };
    path.with_file_name(name)
}

/// `27 attempts at most at inventory; 9 findings (3 errors)`.
fn summary(r: &hopwise_analyze::Report) -> String {
    let errors = r
        .findings
        .iter()
        .filter(|f| f.severity == hopwise_analyze::Severity::Error)
        .count();
    let worst = r
        .fanout
        .iter()
        .max_by_key(|row| row.attempts)
        .map_or(String::new(), |row| {
            format!(
                "{} attempts at most at {} ({}); ",
                row.attempts,
                row.service,
                row.failure.label()
            )
        });
    format!("{worst}{} finding(s), {errors} error(s)", r.findings.len())
}
