//! What `up` prints once everything is ready: a row per copy, where the dashboard is, where
//! the load goes, and how to stop. Pure.

use std::net::SocketAddr;
use std::path::Path;

use hopwise_model::Mesh;

use super::load::LoadTarget;
use super::plan::Plan;

pub fn text(
    mesh: &Mesh,
    plan: &Plan,
    control: SocketAddr,
    dashboard: Option<SocketAddr>,
    load: Option<&LoadTarget>,
    run: &Path,
) -> String {
    let header = [
        "service", "copy", "kind", "app", "inbound", "admin", "identity", "knobs",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for s in &plan.services {
        for c in &s.copies {
            let kind = match s.sample {
                Some(k) if c.captured => format!("{} (captured)", k.name()),
                Some(k) => k.name().to_owned(),
                None if s.run.is_some() && c.captured => "run (captured)".to_owned(),
                None if s.run.is_some() => "run".to_owned(),
                None => "your app".to_owned(),
            };
            let (inbound, admin, identity) = match &c.proxy {
                Some(p) => (
                    p.inbound.to_string(),
                    p.admin.to_string(),
                    mesh.identity(&s.name),
                ),
                None => ("-".into(), "-".into(), "outside the mesh (TLS)".into()),
            };
            rows.push(vec![
                s.name.clone(),
                c.copy.to_string(),
                kind,
                c.app.to_string(),
                inbound,
                admin,
                identity,
                c.knobs.map_or("-".to_owned(), |k| k.to_string()),
            ]);
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!("hopwise up: mesh `{}` is running\n\n", mesh.name);
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&format!(
        "control plane: {control} (hopwise status --server {control} --state {})\n",
        run.join("state").display()
    ));
    match dashboard {
        Some(d) => out.push_str(&format!("dashboard:     http://{d}/\n")),
        None => out.push_str(
            "dashboard:     not in this build (hopwise control has no --dashboard yet)\n",
        ),
    }
    if let Some(g) = &plan.gateway {
        out.push_str(&format!(
            "shop:          http://{}/ (the gateway `{}`, {}: the way in from outside the mesh)\n",
            g.http,
            g.name,
            mesh.identity(&g.name)
        ));
    }
    if let Some(l) = load
        && let Some(g) = &l.via
    {
        out.push_str(&format!(
            "load:          {} requests/s through {g} into {}\n",
            l.rate, l.service
        ));
    } else if let Some(l) = load {
        let apps: Vec<String> = l.apps.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "load:          {} requests/s into {}'s app at {} — directly: the load client is outside the mesh\n",
            l.rate,
            l.service,
            apps.join(", ")
        ));
    }
    out.push_str(&format!(
        "faults:        hopwise fault SERVICE --fail-first 5 | --error-rate 0.2 | --latency 200ms | --down | --hang | --lose-response | --clear\n\
         run directory: {} (logs/)\n\
         Ctrl-C stops everything.\n",
        run.display()
    ));
    out
}
