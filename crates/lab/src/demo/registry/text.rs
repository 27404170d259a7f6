//! The registry report as text: one row per layout with the seed's two numbers and the
//! failures, then how each was counted. Pure.

use std::fmt::Write as _;

use super::{Layout, LayoutRun, Report};

fn layout_name(r: &Report, l: &LayoutRun) -> String {
    match l.layout {
        Layout::Fixed => "fixed addresses in the mesh file".to_owned(),
        Layout::Registry => format!("control plane (registry, {} ms leases)", r.lease_ttl_ms),
    }
}

fn listed(what: &[String]) -> String {
    if what.is_empty() {
        "0".to_owned()
    } else {
        format!("{} ({})", what.len(), what.join(", "))
    }
}

/// The report's table and notes.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The seed \"Service Mesh\"'s next step, measured: a calls b through its proxy under {} \
         requests/s (a fresh connection each); a third copy of b is added, then copy b0 is \
         SIGKILLed and the load runs {} ms more. Same call policy in both layouts: hopwise's \
         retries, no outlier ejection, round robin.",
        r.rate, r.after_kill_ms
    );
    let _ = writeln!(out);
    let rows: Vec<[String; 6]> = r
        .layouts
        .iter()
        .map(|l| {
            [
                layout_name(r, l),
                listed(&l.files_touched),
                listed(&l.restarted),
                format!("{} of {}", l.add.failed, l.add.sent),
                format!("{} of {} tries", l.sent_to_dead, l.tries),
                format!("{} of {}", l.kill.failed, l.kill.sent),
            ]
        })
        .collect();
    let heads = [
        "layout",
        "files touched to add a copy",
        "proxies restarted",
        "failed while adding",
        "sent to the dead address",
        "failed after the kill",
    ];
    let widths: Vec<usize> = (0..heads.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .chain([heads[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    out.push_str(&line(&heads));
    for row in &rows {
        out.push_str(&line(&row.each_ref().map(String::as_str)));
    }
    let _ = writeln!(out);
    for l in &r.layouts {
        let _ = writeln!(
            out,
            "{}: after the kill a's proxy made {} tries toward b and b's apps received {}, so \
             {} went to b0's dead address ({} retried at once after a refused connection); \
             answers by copy while adding {:?}, after the kill {:?}; failures {:?} / {:?}.",
            layout_name(r, l),
            l.tries,
            l.app_requests,
            l.sent_to_dead,
            l.connect_failure_retries,
            l.add.by_copy,
            l.kill.by_copy,
            l.add.failures,
            l.kill.failures,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::registry::Tally;

    fn run(layout: Layout, files: &[&str], dead: u64) -> LayoutRun {
        LayoutRun {
            layout,
            files_touched: files.iter().map(|f| (*f).to_owned()).collect(),
            restarted: if files.is_empty() {
                vec![]
            } else {
                vec!["a".to_owned()]
            },
            add: Tally {
                sent: 100,
                ok: 93,
                failed: 7,
                ..Tally::default()
            },
            kill: Tally {
                sent: 300,
                ok: 300,
                ..Tally::default()
            },
            tries: 300 + dead,
            app_requests: 300,
            sent_to_dead: dead,
            connect_failure_retries: dead,
            mesh: String::new(),
        }
    }

    #[test]
    fn the_table_carries_every_number_of_the_report() {
        let r = Report {
            rate: 50,
            after_kill_ms: 6000,
            lease_ttl_ms: 2000,
            layouts: vec![
                run(Layout::Fixed, &["mesh.yaml"], 98),
                run(Layout::Registry, &[], 31),
            ],
            proxy_pids: vec![],
            workdir: "/tmp/x".into(),
        };
        let t = text(&r);
        let fixed = t
            .lines()
            .find(|l| l.starts_with("fixed addresses"))
            .unwrap_or("");
        for cell in [
            "1 (mesh.yaml)",
            "1 (a)",
            "7 of 100",
            "98 of 398 tries",
            "0 of 300",
        ] {
            assert!(fixed.contains(cell), "{cell}: {fixed}");
        }
        let registry = t
            .lines()
            .find(|l| l.starts_with("control plane (registry, 2000 ms leases)"))
            .unwrap_or("");
        assert!(registry.contains("31 of 331 tries"), "{registry}");
        assert!(t.contains("50 requests/s"), "{t}");
    }
}
