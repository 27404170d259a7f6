//! What hopwise's proxies record in a configuration of `bench hops` ([`Observe`]): nothing, the
//! access log to a file (`--access-log`), or tracing at a sampling ratio (`--tracing 1%,100%`),
//! the spans exported over OTLP/gRPC to the stand-in collector the bench runs itself, in
//! process (`samples::collector`, counting spans). One run measures them side by side, so the
//! cost of each is a difference between neighbours. The mesh file's fields are added to the
//! hop's mesh file here; the rest of the bench does not know them.

use std::net::SocketAddr;
use std::path::Path;

use serde::Serialize;

use crate::error::{LabError, io};
use crate::samples::collector::Collector;

/// What the proxies of a configuration record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Observe {
    Off,
    /// Every request's line, JSON, to a file per proxy.
    AccessLog,
    /// Tracing with this share of new traces recorded, in parts per million.
    Tracing {
        ppm: u32,
    },
}

impl Observe {
    /// `""`, `" + access log"`, `" + tracing 1%"`: what a label adds to the mode.
    pub fn suffix(self) -> String {
        match self {
            Observe::Off => String::new(),
            Observe::AccessLog => " + access log".to_owned(),
            Observe::Tracing { ppm } => format!(" + tracing {}%", percent(ppm)),
        }
    }

    /// A file-name part: `""`, `-log`, `-trace-10000`.
    pub fn slug(self) -> String {
        match self {
            Observe::Off => String::new(),
            Observe::AccessLog => "-log".to_owned(),
            Observe::Tracing { ppm } => format!("-trace-{ppm}"),
        }
    }

    pub fn is_off(&self) -> bool {
        *self == Observe::Off
    }
}

impl Serialize for Observe {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Observe::Off => s.serialize_str("off"),
            Observe::AccessLog => s.serialize_str("access-log"),
            Observe::Tracing { ppm } => s.serialize_str(&format!("tracing {}%", percent(*ppm))),
        }
    }
}

/// Parts per million as a percentage without trailing zeros: 10000 → `1`, 5000 → `0.5`.
fn percent(ppm: u32) -> String {
    let text = format!("{:.4}", f64::from(ppm) / 10_000.0);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A `--tracing` value: a percentage (`1%`) or a ratio from 0 to 1 (`0.01`).
pub fn parse_sampling(text: &str) -> Result<Observe, LabError> {
    let t = text.trim();
    let ratio = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok().map(|v| v / 100.0),
        None => t.parse::<f64>().ok(),
    };
    match ratio {
        Some(r) if (0.0..=1.0).contains(&r) => Ok(Observe::Tracing {
            ppm: (r * 1_000_000.0).round() as u32,
        }),
        _ => Err(LabError::Failed(format!(
            "--tracing {text}: a sampling ratio from 0 to 1, or a percentage such as 1% or 100%"
        ))),
    }
}

/// The variants of a run: off first, then the access log, then each ratio (in order, once).
pub fn variants(access_log: bool, tracing: &[String]) -> Result<Vec<Observe>, LabError> {
    let mut v = vec![Observe::Off];
    if access_log {
        v.push(Observe::AccessLog);
    }
    for t in tracing {
        let o = parse_sampling(t)?;
        if !v.contains(&o) {
            v.push(o);
        }
    }
    Ok(v)
}

/// The hop's mesh file (`layout::hop_mesh`'s text) with what `observe` records: `mesh.tracing`
/// toward `collector`, or each service's `access_log` to `<log_dir>/<service>.access.log`.
pub fn with_observe(
    mesh: &str,
    observe: Observe,
    collector: Option<SocketAddr>,
    log_dir: &Path,
) -> String {
    let mut out = String::with_capacity(mesh.len() + 256);
    for line in mesh.lines() {
        out.push_str(line);
        out.push('\n');
        match observe {
            Observe::Tracing { ppm } if line == "mesh:" => {
                let collector =
                    collector.map_or_else(String::new, |c| format!("collector: '{c}', "));
                let ratio = f64::from(ppm) / 1_000_000.0;
                out.push_str(&format!("  tracing: {{ {collector}sampling: {ratio} }}\n"));
            }
            Observe::AccessLog => {
                // A service's key: two spaces of indentation under `services:`.
                if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
                    && !name.starts_with(' ')
                    && !name.is_empty()
                {
                    let file = log_dir.join(format!("{name}.access.log"));
                    let file = file.display().to_string().replace('\'', "''");
                    out.push_str(&format!("    access_log: {{ to: '{file}' }}\n"));
                }
            }
            _ => {}
        }
    }
    out
}

/// The collector of a run with tracing: its own small runtime, in this process.
#[derive(Debug)]
pub struct Receiver {
    _rt: tokio::runtime::Runtime,
    pub collector: Collector,
}

/// Starts the collector when a variant traces.
pub fn receiver(variants: &[Observe]) -> Result<Option<Receiver>, LabError> {
    if !variants
        .iter()
        .any(|o| matches!(o, Observe::Tracing { .. }))
    {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("hopwise-bench-otlp")
        .enable_all()
        .build()
        .map_err(io("cannot start the OTLP receiver's runtime"))?;
    let collector = rt
        .block_on(Collector::grpc(false))
        .map_err(io("cannot start the OTLP receiver"))?;
    Ok(Some(Receiver { _rt: rt, collector }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::layout::{self, CALLEE, CALLER, HopPorts};

    #[test]
    fn sampling_reads_percentages_and_ratios() {
        assert_eq!(
            parse_sampling("1%").unwrap(),
            Observe::Tracing { ppm: 10_000 }
        );
        assert_eq!(
            parse_sampling("0.01").unwrap(),
            Observe::Tracing { ppm: 10_000 }
        );
        assert_eq!(
            parse_sampling("100%").unwrap(),
            Observe::Tracing { ppm: 1_000_000 }
        );
        assert!(parse_sampling("101%").is_err());
        assert!(parse_sampling("x").is_err());
        assert_eq!(Observe::Tracing { ppm: 5000 }.suffix(), " + tracing 0.5%");
        assert_eq!(
            variants(true, &["1%".into(), "0.01".into(), "100%".into()]).unwrap(),
            vec![
                Observe::Off,
                Observe::AccessLog,
                Observe::Tracing { ppm: 10_000 },
                Observe::Tracing { ppm: 1_000_000 }
            ]
        );
    }

    fn hop() -> String {
        let a = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let ports = HopPorts {
            out: a(1),
            inbound: a(2),
            app: a(3),
        };
        layout::hop_mesh(1, &ports, Path::new("/tmp/certs"), false)
    }

    #[test]
    fn the_hop_mesh_gains_what_is_recorded() {
        let collector = SocketAddr::from(([127, 0, 0, 1], 4317));
        let traced = with_observe(
            &hop(),
            Observe::Tracing { ppm: 10_000 },
            Some(collector),
            Path::new("/l"),
        );
        let mesh = hopwise_model::Mesh::from_yaml(&traced).unwrap();
        let t = mesh.observe.tracing.as_ref().unwrap();
        assert_eq!(t.collector.as_deref(), Some("127.0.0.1:4317"));
        assert_eq!(t.ratio, 0.01);
        assert!(mesh.observe.access_logs.is_empty());

        let logged = with_observe(&hop(), Observe::AccessLog, None, Path::new("/l"));
        let mesh = hopwise_model::Mesh::from_yaml(&logged).unwrap();
        assert!(mesh.observe.tracing.is_none());
        for s in [CALLER, CALLEE] {
            let log = &mesh.observe.access_logs[s];
            assert_eq!(log.file.as_deref(), Some(&*format!("/l/{s}.access.log")));
        }
        assert_eq!(
            with_observe(&hop(), Observe::Off, None, Path::new("/l")),
            hop()
        );
    }
}
