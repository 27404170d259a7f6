//! The text the command line shows for the control plane's answers: `hopwise control apply`'s
//! outcome and findings, `hopwise control rotate-ca`'s stage, `hopwise status`'s table, and
//! the versions and times in them. Pure.

use std::time::Duration;

use crate::pb;

/// `3.17`: the 3rd start of the control plane on its state, 17th change since; or `1234`, an
/// etcd revision (replicas sharing a store: the embedded store's start count is never 0).
pub fn version_text(v: u64) -> String {
    if v == 0 {
        "-".to_owned()
    } else if v >> 32 == 0 {
        v.to_string()
    } else {
        format!("{}.{}", v >> 32, v & 0xffff_ffff)
    }
}

/// `in 23h 59m`, `12s ago`.
pub fn relative(target_unix_ms: i64, now_unix_ms: i64) -> String {
    let delta = target_unix_ms - now_unix_ms;
    let d = Duration::from_millis(delta.unsigned_abs());
    let secs = d.as_secs();
    let text = if secs >= 86_400 {
        format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600)
    } else if secs >= 3600 {
        format!("{}h {}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else if secs >= 1 {
        format!("{secs}s")
    } else {
        format!("{}ms", d.as_millis())
    };
    if delta >= 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// What `hopwise control apply` prints: the outcome, then the problems or findings.
pub fn render_apply(r: &pb::ApplyResponse) -> String {
    let mut out = String::new();
    for d in &r.diagnostics {
        out.push_str(d);
        out.push('\n');
    }
    // Errors first, then warnings, each group in the order `hopwise check` found them.
    let mut findings: Vec<&pb::Finding> = r.findings.iter().collect();
    findings.sort_by_key(|f| f.severity != "error");
    for f in findings {
        out.push_str(&format!(
            "{:<8} {}  {}: {}\n         fix: {} ({})\n",
            f.severity, f.code, f.subject, f.message, f.fix, f.path
        ));
    }
    out.push_str(&outcome(r.applied, &r.message, r.version));
    out
}

/// The last line of `apply` and `rotate-ca`: what was done and the version now, or the refusal.
fn outcome(done: bool, message: &str, version: u64) -> String {
    if done {
        format!("{message} — version {}\n", version_text(version))
    } else {
        format!("refused: {message}\n")
    }
}

/// What `hopwise control rotate-ca` prints: the outcome, the trust bundle, and the proxies the
/// stage waits for (or went ahead without).
pub fn render_rotate(r: &pb::RotateCaResponse) -> String {
    let mut out = String::new();
    for p in &r.pending {
        out.push_str(&format!(
            "  {} {} ({}): {}\n",
            p.service,
            if p.proxy.is_empty() { "-" } else { &p.proxy },
            match (p.connected, p.replica.as_str()) {
                (false, _) => "stream closed".to_owned(),
                (true, "") => "stream open".to_owned(),
                (true, replica) => format!("stream open on {replica}"),
            },
            p.reason
        ));
    }
    out.push_str(&format!(
        "trust bundle: {} · CA generation {} · rotation {}\n",
        r.trust_bundle.join(", "),
        r.ca_generation,
        if r.rotation.is_empty() {
            "none in progress"
        } else {
            &r.rotation
        }
    ));
    out.push_str(&outcome(r.done, &r.message, r.version));
    out
}

/// What `hopwise status` prints.
pub fn render_status(s: &pb::StatusResponse, now_unix_ms: i64) -> String {
    let shared = s.store.starts_with("etcd://");
    let mut out = status_head(s, shared, now_unix_ms);
    out.push_str("\nproxies\n");
    if s.proxies.is_empty() {
        out.push_str("  (none has subscribed, acknowledged or asked for a certificate yet)\n");
    } else {
        let mut rows = vec![vec![
            "service".to_owned(),
            "proxy".to_owned(),
            "stream".to_owned(),
            "sent".to_owned(),
            "acked".to_owned(),
            "last ack".to_owned(),
            "certificate".to_owned(),
        ]];
        // Replicas: where each stream is open (the embedded store has one place).
        if shared {
            rows[0].insert(3, "replica".to_owned());
        }
        rows.extend(
            s.proxies
                .iter()
                .map(|p| proxy_row(p, s.ca_generation, shared, now_unix_ms)),
        );
        out.push_str(&table(&rows));
    }
    out.push_str("\nservices\n");
    for svc in &s.services {
        out.push_str(&service_text(svc, shared, now_unix_ms));
    }
    out
}

/// The mesh, its versions and its CA; the shared store, and a CA rotation under way.
fn status_head(s: &pb::StatusResponse, shared: bool, now_unix_ms: i64) -> String {
    let mut out = format!(
        "mesh {} · version {} · config version {} · CA expires {}\n",
        s.mesh,
        version_text(s.version),
        s.config_version,
        relative(s.ca_not_after_unix.saturating_mul(1000), now_unix_ms)
    );
    if shared {
        out.push_str(&format!(
            "store {} (shared by replicas; versions are etcd revisions; proxies: every replica's)\n",
            s.store
        ));
    }
    if !s.ca_rotation.is_empty() {
        out.push_str(&format!(
            "CA rotation in progress: {} (generation {}); trust bundle: {}\n",
            s.ca_rotation,
            s.ca_generation,
            s.trust_bundle.join(", ")
        ));
    }
    out
}

/// One proxy's row of the table (`replica` fourth when the store is shared).
fn proxy_row(
    p: &pb::ProxyStatus,
    ca_generation: u64,
    shared: bool,
    now_unix_ms: i64,
) -> Vec<String> {
    let acked = if p.last_acked_version == 0 {
        "-".to_owned()
    } else if p.last_ack_accepted {
        version_text(p.last_acked_version)
    } else {
        format!(
            "{} REJECTED: {}",
            version_text(p.last_acked_version),
            p.last_ack_reason
        )
    };
    let mut row = vec![
        p.service.clone(),
        dash_if_empty(&p.proxy),
        if p.connected { "open" } else { "closed" }.to_owned(),
        version_text(p.last_sent_version),
        acked,
        p.last_ack_unix_ms
            .map_or("-".to_owned(), |t| relative(t, now_unix_ms)),
        match (p.cert_not_after_unix, p.cert_ca_generation) {
            (None, None) => "unknown".to_owned(),
            (None, Some(g)) => format!("CA generation {g}"),
            (Some(t), g) => {
                let expiry = format!("expires {}", relative(t.saturating_mul(1000), now_unix_ms));
                // The generation matters only once the CA has been rotated.
                match g {
                    Some(g) if ca_generation > 1 => format!("{expiry} (CA gen. {g})"),
                    _ => expiry,
                }
            }
        },
    ];
    if shared {
        row.insert(3, dash_if_empty(&p.replica));
    }
    row
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() { "-" } else { s }.to_owned()
}

/// A service's line, and one per registered copy.
fn service_text(svc: &pb::ServiceStatus, shared: bool, now_unix_ms: i64) -> String {
    if svc.external {
        return format!("  {}: outside the mesh\n", svc.service);
    }
    let healthy = svc.copies.iter().filter(|c| c.healthy).count();
    let mut out = format!(
        "  {}: {} cop{} registered, {healthy} healthy; {} certificate(s) issued{}\n",
        svc.service,
        svc.copies.len(),
        if svc.copies.len() == 1 { "y" } else { "ies" },
        svc.certs_issued,
        svc.cert_not_after_unix.map_or(String::new(), |t| format!(
            ", the last expires {}",
            relative(t.saturating_mul(1000), now_unix_ms)
        )),
    );
    for c in &svc.copies {
        out.push_str(&format!(
            "    {}  {}{}  lease {}  expires in {}\n",
            c.inbound_addr,
            if c.healthy { "healthy  " } else { "unhealthy" },
            match c.kubernetes.as_str() {
                "" => String::new(),
                k => format!("  kubernetes: {k:<11}"),
            },
            if shared {
                format!("{:x}", c.lease_id)
            } else {
                version_text(c.lease_id)
            },
            relative(i64::try_from(c.expires_in_ms).unwrap_or(i64::MAX), 0)
                .trim_start_matches("in ")
        ));
    }
    out
}

/// Rows of the same length as columns (the status table has a column more with replicas).
fn table(rows: &[Vec<String>]) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let mut widths = vec![0usize; n];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            line.push(' ');
            line.push_str(cell);
            if i + 1 < n {
                let width = widths.get(i).copied().unwrap_or(0);
                line.push_str(&" ".repeat(width.saturating_sub(cell.chars().count()) + 1));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_times_read_well() {
        assert_eq!(version_text((3 << 32) | 17), "3.17");
        assert_eq!(version_text(0), "-");
        assert_eq!(version_text(1234), "1234", "an etcd revision");
        assert_eq!(relative(90_000, 0), "in 1m 30s");
        assert_eq!(relative(0, 12_000), "12s ago");
        assert_eq!(relative(86_400_000 + 7_200_000, 0), "in 1d 2h");
    }

    #[test]
    fn a_refusal_shows_every_finding() {
        let r = pb::ApplyResponse {
            applied: false,
            message: "m.yaml: `hopwise check` finds 1 error(s); nothing was applied".into(),
            findings: vec![pb::Finding {
                code: "retry-fanout".into(),
                severity: "error".into(),
                subject: "frontend → checkout".into(),
                path: "services.frontend".into(),
                message: "27 attempts".into(),
                fix: "retry at one layer".into(),
            }],
            ..Default::default()
        };
        let text = render_apply(&r);
        assert!(text.contains("error    retry-fanout  frontend → checkout: 27 attempts"));
        assert!(
            text.ends_with(
                "refused: m.yaml: `hopwise check` finds 1 error(s); nothing was applied\n"
            )
        );
    }
}
