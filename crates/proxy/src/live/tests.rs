#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use hopwise_model::Mesh;

use super::*;
use crate::cluster::ClusterShared;
use crate::config::{Cluster, Target};

const BASE: &str = "mesh: { name: live, trust_domain: live.local }
services:
  a:
    copies: [{ inbound: 127.0.0.1:7001, admin: 127.0.0.1:7002, upstreams: { b: 127.0.0.1:7003 } }]
    calls:
      b: { timeout: 2s, retries: { count: 1 } }
  b:
    copies: [{ inbound: 127.0.0.1:7101, app: 127.0.0.1:7102 }]
  c:
    copies: [{ inbound: 127.0.0.1:7201, app: 127.0.0.1:7202 }]
";

fn config(yaml: &str, service: &str) -> ProxyConfig {
    let mesh = Mesh::from_yaml(yaml).unwrap();
    ProxyConfig::from_mesh(
        &mesh,
        service,
        0,
        Path::new("/tmp"),
        Some(Path::new("/certs")),
    )
    .unwrap()
}

fn edited(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replace(from, to)
}

fn next(yaml: &str, service: &str) -> Result<ProxyConfig, NeedsRestart> {
    let old = config(BASE, service);
    next_config(&old, &old, config(yaml, service))
}

#[test]
fn policy_authorization_and_new_upstreams_apply_live() {
    // A route's timeout and retries.
    let c = next(
        &edited(
            "b: { timeout: 2s, retries: { count: 1 } }",
            "b: { timeout: 300ms, retries: { count: 3 } }",
        ),
        "a",
    )
    .unwrap();
    let policy = &c.clusters["b"].routes[0].policy;
    assert_eq!(
        policy.timeout.map(|t| t.get()),
        Some(Duration::from_millis(300))
    );
    assert_eq!(policy.retry.count, 3);
    // A new upstream, reachable through the HTTP-proxy port (it gets no local port).
    let c = next(
        &edited(
            "      b: { timeout: 2s, retries: { count: 1 } }\n",
            "      b: { timeout: 2s, retries: { count: 1 } }\n      c: { timeout: 1s }\n",
        ),
        "a",
    )
    .unwrap();
    assert!(c.clusters.contains_key("c"));
    assert_eq!(c.upstream_ports.keys().collect::<Vec<_>>(), ["b"]);
    // Who may call b.
    let c = next(
        &edited("  b:\n    copies", "  b:\n    allow: [c]\n    copies"),
        "b",
    )
    .unwrap();
    assert_eq!(c.allowed_callers, ["spiffe://live.local/service/c"]);
    assert!(!c.authorizes("spiffe://live.local/service/a", "/"));
}

#[test]
fn what_the_running_process_fixed_is_taken_from_it() {
    let old = config(BASE, "a");
    let mut running = old.clone();
    // Command-line overrides: another admin port, more workers, plain text.
    running.admin = Some("127.0.0.1:9999".parse().unwrap());
    running.workers = 4;
    running.plaintext = true;
    let c = next_config(&running, &old, config(&BASE.replace("2s", "3s"), "a")).unwrap();
    assert_eq!(c.admin, running.admin);
    assert_eq!((c.workers, c.plaintext), (4, true));
    assert_eq!(
        c.clusters["b"].routes[0].policy.timeout.map(|t| t.get()),
        Some(Duration::from_secs(3))
    );
}

#[test]
fn listeners_local_ports_app_and_identity_need_a_restart() {
    let cases = [
        (
            edited("inbound: 127.0.0.1:7001", "inbound: 127.0.0.1:7011"),
            "a",
            "the inbound listener changed (127.0.0.1:7001 → 127.0.0.1:7011)",
        ),
        (
            edited("admin: 127.0.0.1:7002", "admin: 127.0.0.1:7012"),
            "a",
            "the admin listener changed",
        ),
        (
            edited(
                "upstreams: { b: 127.0.0.1:7003 }",
                "upstreams: { b: 127.0.0.1:7013 }",
            ),
            "a",
            "the local port for b changed",
        ),
        (
            edited(
                "upstreams: { b: 127.0.0.1:7003 }",
                "upstreams: { b: 127.0.0.1:7003, c: 127.0.0.1:7004 }",
            )
            .replace(
                "      b: { timeout: 2s, retries: { count: 1 } }\n",
                "      b: { timeout: 2s, retries: { count: 1 } }\n      c: {}\n",
            ),
            "a",
            "a new local port for c",
        ),
        (
            edited("app: 127.0.0.1:7102", "app: 127.0.0.1:7112"),
            "b",
            "the app's address changed",
        ),
        (
            edited("trust_domain: live.local", "trust_domain: other.local"),
            "a",
            "this proxy's identity changed",
        ),
    ];
    for (yaml, service, want) in cases {
        let err = next(&yaml, service).unwrap_err();
        assert!(
            err.0.iter().any(|w| w.starts_with(want)),
            "{service}: {err} (wanted {want})"
        );
    }
    // Several reasons at once are all given.
    let yaml = edited(
        "inbound: 127.0.0.1:7001, admin: 127.0.0.1:7002",
        "inbound: 127.0.0.1:7011, admin: 127.0.0.1:7012",
    );
    assert_eq!(next(&yaml, "a").unwrap_err().0.len(), 2);
}

#[test]
fn a_local_port_for_an_upstream_no_longer_called_needs_a_restart() {
    let old = config(BASE, "a");
    // The port came from the command line (`--upstream b=…`), the file has none.
    let mut old_file = old.clone();
    old_file.upstream_ports.clear();
    let mut new = old_file.clone();
    new.clusters.clear();
    let err = next_config(&old, &old_file, new).unwrap_err();
    assert_eq!(
        err.0,
        ["this proxy listens on a local port for b, which it would no longer call"]
    );
}

#[test]
fn a_local_port_turning_opaque_tcp_needs_a_restart() {
    let yaml = edited(
        "copies: [{ inbound: 127.0.0.1:7101, app: 127.0.0.1:7102 }]",
        "tcp: {}\n    copies: [{ inbound: 127.0.0.1:7101, app: 127.0.0.1:7102 }]",
    );
    assert_eq!(
        next(&yaml, "a").unwrap_err().0,
        ["the local port for b would change between HTTP and opaque TCP"]
    );
    // The callee's own proxy has no local port for itself: its `tcp` applies live.
    assert!(next(&yaml, "b").unwrap().tcp.is_some());
}

fn cluster(policy_yaml: &str) -> Cluster {
    let yaml = format!(
        "mesh: {{ name: live, trust_domain: live.local }}
services:
  a: {{ calls: {{ b: {policy_yaml} }} }}
  b: {{}}
"
    );
    let mut c = config(&yaml, "a").clusters["b"].clone();
    c.target = Target::Mesh {
        endpoints: vec!["127.0.0.1:1".parse().unwrap()],
        identity: "spiffe://live.local/service/b".into(),
        labels: Default::default(),
    };
    c
}

#[test]
fn an_upstream_keeps_what_it_learnt_unless_its_parameters_change() {
    let old = ClusterShared::new(&cluster("{ timeout: 2s }"));
    // Route policy only (timeout, retries): copies, budget and caps are kept.
    let next = ClusterShared::next(
        &cluster("{ timeout: 1s, retries: { count: 3 } }"),
        Some(&old),
        &Default::default(),
    );
    assert_eq!(next.kept_from(&old), [true, true, true]);
    // Another balancer: the copies are rebuilt; the budget and caps stay.
    let next = ClusterShared::next(
        &cluster("{ timeout: 2s, balancer: round-robin }"),
        Some(&old),
        &Default::default(),
    );
    assert_eq!(next.kept_from(&old), [false, true, true]);
    // Other caps: the gauges are rebuilt.
    let next = ClusterShared::next(
        &cluster("{ timeout: 2s, limits: { max_requests: 7 } }"),
        Some(&old),
        &Default::default(),
    );
    assert_eq!(next.kept_from(&old), [true, true, false]);
    // New copies reach the kept set.
    let mut moved = cluster("{ timeout: 2s }");
    moved.target = Target::Mesh {
        endpoints: vec!["127.0.0.1:2".parse().unwrap()],
        identity: "spiffe://live.local/service/b".into(),
        labels: Default::default(),
    };
    let next = ClusterShared::next(&moved, Some(&old), &Default::default());
    assert!(next.kept_from(&old)[0]);
    let addrs: Vec<_> = old.endpoints.snapshot().iter().map(|e| e.addr).collect();
    assert_eq!(addrs, ["127.0.0.1:2".parse().unwrap()]);
}
