//! `hopwise demo loan-fee`: the seed "Service Mesh" measurement (its measure.mjs). The same two
//! jobs — a balance query (`/balance/U-41` → GET `/penalty/U-41`) and a payment (`/pay/U-41` →
//! POST `/penalty/pay`) — run through the thick loan service and through the thin one behind a
//! real `hopwise proxy` sidecar, under three sidecar policies: the seed's (3 tries on
//! 502/503/504 whatever the method), hopwise's defaults with `gateway-error` listed, and the
//! same with an `Idempotency-Key` the thin service sends and the fee service honours. Then the
//! fee's counters, the metric rows (the thick service's own counters by action; the sidecar's
//! `/metrics` by route name), what `hopwise check` says of each sidecar policy, and the
//! code-side count of the lines each loan service's own source marks as network concerns.

use hopwise_api::names::metric;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hopwise_model::Mesh;
use serde::Serialize;
use tokio::net::TcpListener;

use super::loan_thick::{LoanThick, Metric};
use super::loan_thin::LoanThin;
use super::{LoanFeeArgs, json_text};
use crate::error::{LabError, io};
use crate::processes::ports::hold;
use crate::processes::proxies::{Metrics, PORT_ATTEMPTS, Proxies, port_taken, scrape};
use crate::progress;

mod text;

use crate::samples::fee::{Fee, FeeCounters};
use crate::samples::wire;
pub use text::text;

/// The thick and thin loan services' own sources, whose marked lines are counted.
const THICK_SOURCE: &str = include_str!("loan_thick.rs");
const THIN_SOURCE: &str = include_str!("loan_thin.rs");

/// The markers of a network concern (the seed's).
const NETWORK: [&str; 4] = ["tls", "timeout", "retry", "metric"];

/// One sidecar policy: `services.loan.calls.fee`'s policy fields.
#[derive(Debug, Clone, Copy)]
struct SidecarPolicy {
    key: &'static str,
    layout: &'static str,
    fields: &'static str,
    idempotency_keys: bool,
}

const POLICIES: [SidecarPolicy; 3] = [
    SidecarPolicy {
        key: "seed",
        layout: "thin + sidecar (the seed's policy)",
        fields: "per_try_timeout: 400ms, retries: { count: 2, on: [gateway-error], only_if_safe: false }",
        idempotency_keys: false,
    },
    SidecarPolicy {
        key: "hopwise",
        layout: "thin + sidecar (hopwise)",
        fields: "per_try_timeout: 400ms, retries: { on: [connect-failure, refused-stream, reset-before-request, gateway-error] }",
        idempotency_keys: false,
    },
    SidecarPolicy {
        key: "hopwise-key",
        layout: "thin + sidecar (hopwise, Idempotency-Key)",
        fields: "per_try_timeout: 400ms, retries: { on: [connect-failure, refused-stream, reset-before-request, gateway-error] }",
        idempotency_keys: true,
    },
];

/// Everything the measurement found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub layouts: Vec<Layout>,
    pub code: Code,
    pub proxy_pids: Vec<u32>,
    pub workdir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct Layout {
    pub name: &'static str,
    /// The sidecar's policy as the mesh file writes it; `None` for the thick layout.
    pub sidecar_policy: Option<&'static str>,
    pub idempotency_key: bool,
    pub balance_code: u16,
    pub payment_code: u16,
    /// Requests that reached the fee service (reads and payments).
    pub reached_fee: u64,
    pub collected: u64,
    /// Processes of the layout: fee and loan, and the sidecar.
    pub processes: u32,
    /// Local hops a request touches: loan → fee, or loan → sidecar → fee.
    pub local_hops: u32,
    pub fee: FeeCounters,
    /// Requests, tries and errors: the thick service's own by action, the sidecar's by route.
    pub metric: BTreeMap<String, Metric>,
    /// What the loan service answered for the payment.
    pub payment_answer: String,
    /// `hopwise check`'s findings on the sidecar's mesh file: `code (severity): subject`.
    pub check: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Code {
    pub thick: SourceCount,
    pub thin: SourceCount,
}

/// What one loan service's source holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceCount {
    pub file: &'static str,
    /// Non-blank lines with a letter, comment lines excluded.
    pub lines: usize,
    /// Lines marked as a network concern (tls, timeout, retry, metric).
    pub network: usize,
    pub by_concern: BTreeMap<&'static str, usize>,
    /// Lines marked as deciding whether a call may be repeated.
    pub safety: usize,
}

/// Counts a source's lines and its marked lines: a marker is a word in brackets after `//`.
pub fn count_source(file: &'static str, source: &str) -> SourceCount {
    let mut c = SourceCount {
        file,
        lines: 0,
        network: 0,
        by_concern: NETWORK.iter().map(|n| (*n, 0)).collect(),
        safety: 0,
    };
    for line in source.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with("//") || !t.chars().any(|ch| ch.is_ascii_alphabetic()) {
            continue;
        }
        c.lines += 1;
        let Some(at) = t.find("// [") else {
            continue;
        };
        let marks = &t[at + 3..];
        let has = |m: &str| marks.contains(&format!("[{m}]"));
        let mut network = false;
        for n in NETWORK {
            if has(n) {
                network = true;
                *c.by_concern.entry(n).or_default() += 1;
            }
        }
        c.network += usize::from(network);
        c.safety += usize::from(has("safety"));
    }
    c
}

fn sidecar_mesh(
    p: &SidecarPolicy,
    upstream: SocketAddr,
    admin: SocketAddr,
    fee: SocketAddr,
) -> String {
    format!(
        "# hopwise demo loan-fee: {layout}
mesh: {{ name: library, trust_domain: library.local, certs: certs }}
services:
  loan:
    calls:
      fee:
        {{
          {fields},
          routes: {{
            balance: {{ path: /penalty/, method: GET }},
            pay: {{ path: /penalty/pay, method: POST }},
          }},
        }}
    copies:
      - {{ upstreams: {{ fee: \"{upstream}\" }}, admin: \"{admin}\" }}
  fee:
    external: {{ address: \"{fee}\", tls: {{ server_name: localhost }} }}
",
        layout = p.layout,
        fields = p.fields,
    )
}

/// The two jobs through `app`, with the fee's counters reset first and read after.
async fn jobs(fee: &Fee, app: SocketAddr) -> Result<(u16, u16, String, FeeCounters), LabError> {
    fee.reset().await?;
    let ask = |path: &'static str| async move {
        wire::get(app, path)
            .await
            .map_err(|e| LabError::Failed(format!("the loan service ({path}): {e}")))
    };
    let balance = ask("/balance/U-41").await?;
    let pay = ask("/pay/U-41").await?;
    let counters = fee.counters().await?;
    Ok((balance.status, pay.status, pay.text(), counters))
}

/// The sidecar's per-route counters toward fee, by the route names of the mesh file.
fn sidecar_metric(m: &Metrics) -> BTreeMap<String, Metric> {
    let mut out = BTreeMap::new();
    for (labels, _) in m.series(metric::REQUESTS) {
        if Metrics::label(labels, "direction") != Some("outbound")
            || Metrics::label(labels, "service") != Some("fee")
        {
            continue;
        }
        let Some(route) = Metrics::label(labels, "route") else {
            continue;
        };
        let l = [
            ("direction", "outbound"),
            ("service", "fee"),
            ("route", route),
        ];
        let errors = [
            ("direction", "outbound"),
            ("service", "fee"),
            ("route", route),
            ("class", "5xx"),
        ];
        out.insert(
            route.to_owned(),
            Metric {
                requests: m.sum(metric::REQUESTS, &l),
                tries: m.sum(metric::TRIES, &l),
                errors: m.sum(metric::RESPONSES, &errors),
            },
        );
    }
    out
}

/// Writes the policy's mesh file and starts the sidecar from it (again, with new ports, if
/// another process took one meanwhile). Returns it with its mesh file, local port for fee and
/// admin address.
async fn start_sidecar(
    p: &SidecarPolicy,
    hopwise: &Path,
    dir: &Path,
    fee: SocketAddr,
    pids: &mut Vec<u32>,
) -> Result<(Proxies, String, SocketAddr, SocketAddr), LabError> {
    let mut attempt = 1;
    loop {
        let ports = hold(2)?;
        let (upstream, admin) = match ports.addrs() {
            [u, a] => (*u, *a),
            _ => return Err(LabError::Failed("not enough free ports".into())),
        };
        let yaml = sidecar_mesh(p, upstream, admin, fee);
        let path = dir.join(format!("{}.yaml", p.key));
        std::fs::write(&path, &yaml).map_err(io(format!("cannot write {}", path.display())))?;
        let mut sidecar = Proxies::new(hopwise, dir);
        let started = sidecar.start(&path, "loan", admin).await;
        pids.extend(sidecar.pids());
        match started {
            Ok(()) => return Ok((sidecar, yaml, upstream, admin)),
            Err(e) if port_taken(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

async fn listener() -> Result<TcpListener, LabError> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io("cannot listen on 127.0.0.1"))
}

/// Runs the measurement and renders its report (text or JSON).
pub async fn run(args: &LoanFeeArgs, hopwise: &Path) -> Result<String, LabError> {
    let tmp = tempfile::Builder::new()
        .prefix("hopwise-demo-loan-fee-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let dir = tmp.path();
    let certs = dir.join("certs");

    // The fee's port is in every mesh file, so it is bound first; its certificate comes from
    // the mesh's development CA, which every layout trusts.
    let work = listener().await?;
    let fee_addr = work
        .local_addr()
        .map_err(io("cannot listen on 127.0.0.1"))?;
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let first = sidecar_mesh(&POLICIES[0], any, any, fee_addr);
    let mesh = Mesh::from_yaml(&first).map_err(|d| LabError::Mesh(d.render("loan.yaml")))?;
    hopwise_proxy::certs::write_dev_certs(&mesh, &certs)
        .map_err(|e| LabError::Failed(format!("cannot write the certificates: {e}")))?;
    let fee = Fee::start(work, &certs).await?;

    let mut layouts = Vec::new();
    progress("loan-fee: thick application");
    let thick = LoanThick::start(listener().await?, fee.work, &certs.join("ca.pem"))?;
    let (balance, payment, answer, counters) = jobs(&fee, thick.addr).await?;
    let metric = wire::get(thick.addr, "/metric")
        .await
        .map_err(|e| LabError::Failed(format!("the thick loan service's metric: {e}")))?;
    let metric: BTreeMap<String, Metric> = serde_json::from_slice(&metric.body)
        .map_err(|e| LabError::Failed(format!("the thick loan service's metric: {e}")))?;
    drop(thick);
    layouts.push(Layout {
        name: "thick application",
        sidecar_policy: None,
        idempotency_key: false,
        balance_code: balance,
        payment_code: payment,
        reached_fee: counters.read + counters.payment,
        collected: counters.collected,
        processes: 2,
        local_hops: 1,
        fee: counters,
        metric,
        payment_answer: answer,
        check: Vec::new(),
    });

    let mut pids = Vec::new();
    for p in &POLICIES {
        progress(&format!("loan-fee: {}", p.layout));
        let (mut sidecar, yaml, upstream, admin) =
            start_sidecar(p, hopwise, dir, fee_addr, &mut pids).await?;
        let mesh = Mesh::from_yaml(&yaml).map_err(|d| LabError::Mesh(d.render("loan.yaml")))?;
        let check = hopwise_analyze::check(&mesh, &hopwise_analyze::Options::default())
            .findings
            .iter()
            .map(|f| format!("{} ({:?}): {}", f.code, f.severity, f.subject).to_lowercase())
            .collect();
        let thin = LoanThin::start(listener().await?, upstream, p.idempotency_keys);
        let measured = async {
            let jobs = jobs(&fee, thin.addr).await?;
            Ok::<_, LabError>((jobs, sidecar_metric(&scrape(admin).await?)))
        }
        .await
        .map_err(|e| LabError::Failed(format!("{e}\n{}", sidecar.stderr_tails())))?;
        let ((balance, payment, answer, counters), metric) = measured;
        sidecar.stop();
        layouts.push(Layout {
            name: p.layout,
            sidecar_policy: Some(p.fields),
            idempotency_key: p.idempotency_keys,
            balance_code: balance,
            payment_code: payment,
            reached_fee: counters.read + counters.payment,
            collected: counters.collected,
            processes: 3,
            local_hops: 2,
            fee: counters,
            metric,
            payment_answer: answer,
            check,
        });
    }

    let report = Report {
        layouts,
        code: Code {
            thick: count_source("loan_thick.rs", THICK_SOURCE),
            thin: count_source("loan_thin.rs", THIN_SOURCE),
        },
        proxy_pids: pids,
        workdir: dir.to_owned(),
    };
    if args.json {
        json_text(&report)
    } else {
        Ok(text(&report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_lines_are_counted_by_concern() {
        let src = "//! docs mention // [tls] and are not code\n\
                   use a::b; // [tls]\n\
                   \n\
                   let x = 1; // [retry] [safety]\n\
                   let y = 2; // [metric]\n\
                   }\n\
                   let z = 3;\n";
        let c = count_source("x.rs", src);
        assert_eq!(c.lines, 4);
        assert_eq!(c.network, 3);
        assert_eq!(c.by_concern["tls"], 1);
        assert_eq!(c.by_concern["retry"], 1);
        assert_eq!(c.safety, 1);
    }

    #[test]
    fn the_thin_service_marks_no_network_concern_and_the_thick_one_marks_each() {
        let thick = count_source("loan_thick.rs", THICK_SOURCE);
        let thin = count_source("loan_thin.rs", THIN_SOURCE);
        assert_eq!(thin.network, 0);
        assert_eq!(thin.safety, 1);
        assert!(thick.by_concern.values().all(|v| *v > 0), "{thick:?}");
        assert!(thick.safety >= 1);
        assert!(thick.lines > thin.lines);
    }

    #[test]
    fn every_sidecar_mesh_is_valid() {
        let a = SocketAddr::from(([127, 0, 0, 1], 9001));
        for p in &POLICIES {
            let yaml = sidecar_mesh(p, a, SocketAddr::from(([127, 0, 0, 1], 9002)), a);
            assert!(Mesh::from_yaml(&yaml).is_ok(), "{yaml}");
        }
    }
}
