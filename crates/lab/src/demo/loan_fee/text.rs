//! The loan-fee report as the seed prints it: the code each loan service holds, then what
//! happened under each sidecar policy. Pure.

use std::fmt::Write as _;

use super::{NETWORK, Report, SourceCount};

/// The report as the seed prints it.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The seed's \"Service Mesh\" measurement: the same two jobs — a balance query (GET \
         /penalty/U-41) and a payment (POST /penalty/pay) — through a thick loan service and a \
         thin one behind a `hopwise proxy` sidecar, against a fee service over TLS that rejects \
         the first two reads with 503 and answers the first payment 503 after collecting it."
    );
    let _ = writeln!(out);
    let name_w = r.layouts.iter().map(|l| l.name.len()).max().unwrap_or(18) + 2;
    let heads = [
        "balance code",
        "payment code",
        "reached fee",
        "collected",
        "processes",
        "local hops",
    ];
    let _ = write!(out, "{:<name_w$}", "layout");
    for h in heads {
        let _ = write!(out, "{h:>14}");
    }
    let _ = writeln!(out);
    for l in &r.layouts {
        let _ = write!(out, "{:<name_w$}", l.name);
        for v in [
            u64::from(l.balance_code),
            u64::from(l.payment_code),
            l.reached_fee,
            l.collected,
            u64::from(l.processes),
            u64::from(l.local_hops),
        ] {
            let _ = write!(out, "{v:>14}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
    for l in &r.layouts {
        let rows: Vec<String> = l
            .metric
            .iter()
            .map(|(k, m)| format!("{k} {}/{}/{}", m.requests, m.tries, m.errors))
            .collect();
        let whose = if l.sidecar_policy.is_some() {
            "the sidecar's /metrics, by route"
        } else {
            "its own counters, by action"
        };
        let _ = writeln!(
            out,
            "{:<name_w$} metric (requests/tries/errors): {}   ({whose})",
            l.name,
            rows.join("  ")
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Sidecar policies (services.loan.calls.fee in the mesh file):"
    );
    for l in &r.layouts {
        let Some(policy) = l.sidecar_policy else {
            continue;
        };
        let _ = writeln!(out, "  {}: {policy}", l.name);
        if l.idempotency_key {
            let _ = writeln!(
                out,
                "    the thin loan service sends an Idempotency-Key with the payment; the fee \
                 service answered the repeat with its stored result ({} deduplicated)",
                l.fee.deduplicated
            );
        }
        let _ = writeln!(out, "    the app got for the payment: {}", l.payment_answer);
        if !l.check.is_empty() {
            let _ = writeln!(out, "    hopwise check: {}", l.check.join("; "));
        }
    }
    let _ = writeln!(out);
    let (k, i) = (&r.code.thick, &r.code.thin);
    let _ = writeln!(
        out,
        "{} = {} lines, {} = {} lines (non-blank lines with a letter, comments excluded)",
        k.file, k.lines, i.file, i.lines
    );
    let concerns = |c: &SourceCount| {
        NETWORK
            .iter()
            .map(|n| format!("{n} {}", c.by_concern.get(n).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "lines marked as network concerns: thick loan service {} ({}) -> thin loan service {}",
        k.network,
        concerns(k),
        i.network
    );
    let _ = writeln!(
        out,
        "lines that decide whether a call may be repeated: thick {} (the `safe` function), thin {} \
         (the Idempotency-Key) — that knowledge does not move to the sidecar",
        k.safety, i.safety
    );
    let _ = writeln!(
        out,
        "processes and local hops are the layout's (fee, loan, and the sidecar): here the fee and \
         both loan services run inside the demo process, and each sidecar is a real `hopwise \
         proxy` process."
    );
    out
}
