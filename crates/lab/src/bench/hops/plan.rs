//! What `hopwise bench hops` will run, before it runs anything: the options in force
//! ([`plan`]), every configuration in the report's order ([`configurations`]), the peers
//! installed here (nginx, HAProxy, Envoy) and the machine the figures come from.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::super::layout::Peer;
use super::super::report::{Config, Machine, PeerInfo, Plan, System};
use super::super::{HopsArgs, Mode};
use super::observe::Observe;
use crate::error::LabError;
use crate::processes::supervisor::find_program;

/// The options in force: the defaults, `--quick`'s, then what was given.
pub fn plan(a: &HopsArgs) -> Result<Plan, LabError> {
    let q = a.quick;
    let requests = a.requests.unwrap_or(if q { 300 } else { 4000 });
    let duration = a
        .duration
        .map(|d| d.get())
        .unwrap_or(Duration::from_secs(if q { 1 } else { 10 }));
    let p = Plan {
        runs: a.runs.unwrap_or(if q { 1 } else { 5 }),
        requests,
        warmup: a.warmup.unwrap_or((requests / 10).max(50)),
        rate: a.rate,
        connections: a.connections,
        duration_s: duration.as_secs_f64(),
        max_hops: a.max_hops.unwrap_or(if q { 2 } else { 4 }),
        workers: a.workers,
        modes: {
            let mut m = a.modes.clone();
            m.sort();
            m.dedup();
            m
        },
        pinned: a.pin,
        peers: a.peers,
        quick: q,
        observe: super::observe::variants(a.access_log, &a.tracing)?,
        paired: a.paired,
        blocks: a.blocks,
    };
    let bad = |what: &str| Err(LabError::Failed(what.to_owned()));
    if p.runs == 0 {
        return bad("--runs must be at least 1");
    }
    if p.requests == 0 {
        return bad("--requests must be at least 1");
    }
    if p.rate == 0 || p.rate > 100_000 {
        return bad("--rate: choose 1 to 100000 requests per second");
    }
    if p.connections == 0 || p.connections > 1024 {
        return bad("--connections: choose 1 to 1024");
    }
    if duration < Duration::from_millis(100) {
        return bad("--duration must be at least 100ms");
    }
    if p.max_hops == 0 || p.max_hops > 16 {
        return bad("--max-hops: choose 1 to 16 (a slope needs at least 0 and 1 hops)");
    }
    if p.workers == 0 || p.workers > 64 {
        return bad("--workers: choose 1 to 64");
    }
    if p.modes.is_empty() {
        return bad("--modes: name plain, mtls, tcp, captured or several");
    }
    if p.paired && p.peers {
        return bad("--paired measures hopwise's pairs only: run --peers without it");
    }
    if p.paired && (p.blocks == 0 || p.blocks as u64 > p.requests) {
        return bad("--blocks: choose 1 to --requests");
    }
    Ok(p)
}

/// Every configuration, in the order of the report: 0 hops, then system × mode × hops, and
/// hopwise's HTTP modes again with each of `observe` past the first (off).
pub fn configurations(
    systems: &[System],
    modes: &[Mode],
    max_hops: usize,
    observe: &[Observe],
) -> Vec<Config> {
    let mut c = vec![Config::DIRECT];
    for s in systems {
        for m in modes {
            if *m == Mode::Tcp && !matches!(s, System::Hopwise | System::Nginx) {
                continue; // opaque TCP is compared with nginx's `stream` only
            }
            if *m == Mode::Captured && *s != System::Hopwise {
                continue; // capture is hopwise's (its proxies' capture listener)
            }
            for o in observe {
                // Only hopwise records, and an opaque tunnel has no requests to record; a
                // captured chain is compared with the mTLS one recording nothing.
                let records_nothing = matches!(m, Mode::Tcp | Mode::Captured);
                if *o != Observe::Off && (*s != System::Hopwise || records_nothing) {
                    continue;
                }
                for hops in 1..=max_hops {
                    c.push(Config {
                        system: *s,
                        mode: Some(*m),
                        hops,
                        observe: *o,
                    });
                }
            }
        }
    }
    c
}

pub(super) fn peer_system(p: Peer) -> System {
    match p {
        Peer::Nginx => System::Nginx,
        Peer::Haproxy => System::Haproxy,
        Peer::Envoy => System::Envoy,
    }
}

/// The installed peers and their versions.
pub(super) fn detect_peers() -> Vec<(Peer, PathBuf, String)> {
    Peer::ALL
        .iter()
        .filter_map(|p| {
            let path = find_program(p.program())?;
            let flag = match p {
                Peer::Nginx | Peer::Haproxy => "-v",
                Peer::Envoy => "--version",
            };
            let out = Command::new(&path).arg(flag).output().ok()?;
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let version = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or(p.program())
                .trim_start_matches("nginx version: ")
                .replace("HAProxy version ", "HAProxy/");
            // `HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://…`: name and version.
            let version = match p {
                Peer::Haproxy => version.split(' ').next().unwrap_or_default().to_owned(),
                _ => version,
            };
            Some((*p, path, version))
        })
        .collect()
}

/// The 1, 5 and 15 minute load averages.
pub(super) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(super) fn machine(peers: &[(Peer, PathBuf, String)], load_start: String) -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    Machine {
        cpu,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        hopwise: env!("CARGO_PKG_VERSION").to_owned(),
        peers: peers
            .iter()
            .map(|(p, path, v)| PeerInfo {
                name: p.program().to_owned(),
                path: path.display().to_string(),
                version: v.clone(),
            })
            .collect(),
        load_start,
        load_end: load_average(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> HopsArgs {
        HopsArgs {
            runs: None,
            requests: None,
            rate: 1000,
            connections: 16,
            duration: None,
            max_hops: None,
            workers: 2,
            modes: vec![Mode::Mtls, Mode::Plain],
            pin: false,
            peers: false,
            json: false,
            svg: PathBuf::from("x.svg"),
            quick: false,
            warmup: None,
            access_log: false,
            tracing: Vec::new(),
            state: PathBuf::from("/run/hopwise/bench"),
            paired: false,
            blocks: 10,
        }
    }

    #[test]
    fn defaults_and_the_quick_preset() {
        let p = plan(&args()).unwrap();
        assert_eq!(
            (p.runs, p.requests, p.warmup, p.max_hops),
            (5, 4000, 400, 4)
        );
        assert_eq!(p.duration_s, 10.0);
        assert_eq!(p.modes, vec![Mode::Plain, Mode::Mtls]);
        let q = plan(&HopsArgs {
            quick: true,
            ..args()
        })
        .unwrap();
        assert_eq!((q.runs, q.requests, q.warmup, q.max_hops), (1, 300, 50, 2));
        assert_eq!(q.duration_s, 1.0);
        let q1 = plan(&HopsArgs {
            quick: true,
            max_hops: Some(1),
            ..args()
        })
        .unwrap();
        assert_eq!(q1.max_hops, 1);
        assert!(
            plan(&HopsArgs {
                max_hops: Some(0),
                ..args()
            })
            .is_err()
        );
    }

    #[test]
    fn configurations_share_one_zero_hop_point() {
        let c = configurations(
            &[System::Hopwise, System::Nginx],
            &[Mode::Plain, Mode::Mtls],
            2,
            &[Observe::Off],
        );
        assert_eq!(c.len(), 1 + 2 * 2 * 2);
        assert_eq!(c[0], Config::DIRECT);
        assert_eq!(c.iter().filter(|c| c.hops == 0).count(), 1);
        assert_eq!(c[1].label(), "hopwise plain 1 hop");
        assert_eq!(c[8].label(), "nginx mtls 2 hops");
    }

    #[test]
    fn captured_chains_are_hopwise_s_and_record_nothing() {
        let observe = [Observe::Off, Observe::AccessLog];
        let c = configurations(
            &[System::Hopwise, System::Nginx],
            &[Mode::Mtls, Mode::Captured],
            1,
            &observe,
        );
        let labels: Vec<String> = c.iter().map(Config::label).collect();
        assert_eq!(
            labels,
            [
                "direct, 0 hops",
                "hopwise mtls 1 hop",
                "hopwise mtls + access log 1 hop",
                "hopwise captured 1 hop",
                "nginx mtls 1 hop",
            ]
        );
    }

    #[test]
    fn what_is_recorded_multiplies_hopwise_http_chains_only() {
        let p = plan(&HopsArgs {
            access_log: true,
            tracing: vec!["1%".into(), "100%".into()],
            modes: vec![Mode::Plain, Mode::Tcp],
            ..args()
        })
        .unwrap();
        assert_eq!(p.observe.len(), 4);
        let c = configurations(&[System::Hopwise, System::Nginx], &p.modes, 1, &p.observe);
        let labels: Vec<String> = c.iter().map(Config::label).collect();
        assert_eq!(
            labels,
            [
                "direct, 0 hops",
                "hopwise plain 1 hop",
                "hopwise plain + access log 1 hop",
                "hopwise plain + tracing 1% 1 hop",
                "hopwise plain + tracing 100% 1 hop",
                "hopwise tcp 1 hop",
                "nginx plain 1 hop",
                "nginx tcp 1 hop",
            ]
        );
        assert!(
            plan(&HopsArgs {
                tracing: vec!["2".into()],
                ..args()
            })
            .is_err()
        );
    }
}
