//! The snapshot stream a proxy reads on its control connection: any bytes as a run of
//! length-delimited `Snapshot` messages (the wire type of `crates/api`'s control protocol), each
//! merged as the proxy merges it (`hopwise_proxy::control::Received`) and made the proxy's
//! configuration as it makes it (`ControlOptions::to_cached`, `ControlOptions::config`). Never a
//! panic, and:
//! - a whole message (`base_version` 0) is taken as it is; a delta on the last snapshot merged is
//!   merged onto it, or refused with `Resync::Apply`; a delta on anything else (or on nothing) is
//!   refused with `Resync::Base`, naming what was last received; after a refusal only a whole
//!   message is taken;
//! - a merged snapshot is whole (no base, nothing removed, no order) with the delta's version,
//!   its fields sent only when changed taken from the delta or else the base, each upstream the
//!   delta names holding the base's endpoints less those removed plus those added (sorted, each
//!   once), each it does not name as the base had it, in the delta's order when it gives one;
//! - the control plane's `diff` of the base and the merged snapshot applies back to the merged
//!   one, where `api::delta` promises it (optional strings present, endpoint lists sorted and
//!   each once, upstream names each once);
//! - the configuration made of it points each upstream's cluster at the snapshot's endpoints
//!   that are socket addresses, no other.
#![no_main]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hopwise_api::delta::{apply, diff};
use hopwise_proxy::config::Target;
use hopwise_proxy::control::{ControlOptions, Received, Resync, Token, pb};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn options() -> ControlOptions {
    ControlOptions {
        servers: vec!["https://127.0.0.1:7910".to_owned()],
        control_ca: PathBuf::from("/nonexistent/hopwise-fuzz/ca.pem"),
        token: Token::fixed("token"),
        service: "checkout".to_owned(),
        copy: 0,
        name: "checkout-0".to_owned(),
        cache: PathBuf::from("/nonexistent/hopwise-fuzz"),
        health_path: "/".to_owned(),
        lease_ttl: Duration::from_secs(10),
        advertise: None,
        labels: Default::default(),
    }
}

fuzz_target!(|data: &[u8]| {
    let opts = options();
    let mut received = Received::default();
    // The oracle's own record of the last snapshot merged on this stream.
    let mut last: Option<pb::Snapshot> = None;
    let mut rest = data;
    while !rest.is_empty() {
        let Ok(message) = pb::Snapshot::decode_length_delimited(&mut rest) else {
            break;
        };
        let (version, base) = (message.version, message.base_version);
        match received.merge(message.clone()) {
            Ok(whole) => {
                let whole = whole.clone();
                if base == 0 {
                    assert_eq!(whole, message, "a whole message changed");
                } else {
                    let prev = last.as_ref().expect("a delta merged onto nothing");
                    assert_eq!(prev.version, base, "a delta merged onto another base");
                    merged(prev, &message, &whole);
                    round_trip(prev, &whole);
                }
                configured(&opts, &whole);
                last = Some(whole);
            }
            Err(e) => {
                assert_ne!(base, 0, "a whole message refused: {e}");
                assert_eq!(e.version(), version);
                let held = last.as_ref().map(|l| l.version);
                match &e {
                    Resync::Base { received: r, .. } => {
                        assert_ne!(held, Some(base), "refused a delta on its base: {e}");
                        assert_eq!(*r, held.unwrap_or(0), "{e}");
                    }
                    Resync::Apply { .. } => {
                        assert_eq!(held, Some(base), "{e}");
                        let prev = last.as_ref().expect("checked above");
                        assert!(apply(prev, message).is_err(), "refused what applies: {e}");
                    }
                }
                last = None;
            }
        }
    }
});

/// A delta merged onto `prev` gives `whole` (see the module's doc).
fn merged(prev: &pb::Snapshot, delta: &pb::Snapshot, whole: &pb::Snapshot) {
    assert_eq!(whole.base_version, 0);
    assert!(whole.removed_upstreams.is_empty() && whole.upstream_order.is_empty());
    assert!(!whole.allowed_callers_changed);
    assert_eq!(
        (whole.version, whole.config_version, whole.ca_generation),
        (delta.version, delta.config_version, delta.ca_generation)
    );
    assert_eq!(
        (&whole.service, &whole.identity),
        (&delta.service, &delta.identity)
    );
    let sent_or_held = |d: &Option<String>, p: &Option<String>| d.clone().or_else(|| p.clone());
    assert_eq!(
        whole.mesh_yaml,
        sent_or_held(&delta.mesh_yaml, &prev.mesh_yaml)
    );
    assert_eq!(
        whole.policy_json,
        sent_or_held(&delta.policy_json, &prev.policy_json)
    );
    assert_eq!(
        whole.trust_bundle_pem,
        sent_or_held(&delta.trust_bundle_pem, &prev.trust_bundle_pem)
    );
    let callers = if delta.allowed_callers_changed {
        &delta.allowed_callers
    } else {
        &prev.allowed_callers
    };
    assert_eq!(&whole.allowed_callers, callers);
    if !delta.upstream_order.is_empty() {
        let names: Vec<&String> = whole.upstreams.iter().map(|u| &u.service).collect();
        assert!(names.iter().copied().eq(&delta.upstream_order), "{names:?}");
    }
    let unique = |s: &pb::Snapshot| {
        let mut seen = BTreeSet::new();
        s.upstreams.iter().all(|u| seen.insert(&u.service))
    };
    if !unique(prev) || !unique(delta) {
        return; // the per-upstream arithmetic below assumes each name once
    }
    for u in &whole.upstreams {
        assert!(u.removed_endpoints.is_empty());
        // Removed and named again: it starts from nothing.
        let removed = delta.removed_upstreams.contains(&u.service);
        let before = prev.upstreams.iter().find(|p| p.service == u.service);
        let before = before.filter(|_| !removed);
        match delta.upstreams.iter().find(|c| c.service == u.service) {
            Some(change) => {
                let mut want: BTreeSet<&String> =
                    before.iter().flat_map(|b| &b.endpoints).collect();
                for r in &change.removed_endpoints {
                    assert!(want.remove(r), "removed {r}, which the base lacks");
                }
                for a in &change.endpoints {
                    assert!(want.insert(a), "added {a}, which the base holds");
                }
                assert!(
                    u.endpoints.iter().eq(want),
                    "{}: {:?}",
                    u.service,
                    u.endpoints
                );
                assert_eq!(u.identity, change.identity);
            }
            None => {
                let before = before.expect("an upstream from nowhere");
                assert_eq!(u, before, "an upstream the delta does not name changed");
            }
        }
    }
}

/// `apply(prev, diff(prev, next)) == next`, where `api::delta` promises it.
fn round_trip(prev: &pb::Snapshot, next: &pb::Snapshot) {
    let canonical = |s: &pb::Snapshot| {
        let mut names = BTreeSet::new();
        s.version != 0
            && s.base_version == 0
            && s.mesh_yaml.is_some()
            && s.policy_json.is_some()
            && s.trust_bundle_pem.is_some()
            && s.removed_upstreams.is_empty()
            && s.upstream_order.is_empty()
            && !s.allowed_callers_changed
            && s.upstreams.iter().all(|u| {
                names.insert(&u.service)
                    && u.removed_endpoints.is_empty()
                    && u.endpoints.windows(2).all(|w| w[0] < w[1])
            })
    };
    if canonical(prev) && canonical(next) {
        let d = diff(prev, next);
        assert_eq!(apply(prev, d.clone()).as_ref(), Ok(next), "delta {d:?}");
    }
}

/// The configuration made of a whole snapshot (when its mesh file gives one) points each
/// upstream's cluster at the endpoints that are socket addresses.
fn configured(opts: &ControlOptions, whole: &pb::Snapshot) {
    let cached = opts.to_cached(whole);
    assert_eq!(cached.version, whole.version);
    assert_eq!(
        cached.mesh_yaml,
        whole.mesh_yaml.clone().unwrap_or_default()
    );
    for (service, addrs) in &cached.upstreams {
        // The last upstream of that name, as a map keeps it.
        let sent = whole.upstreams.iter().rev().find(|u| &u.service == service);
        let sent = sent.expect("an upstream the snapshot lacks");
        let want: Vec<SocketAddr> = sent
            .endpoints
            .iter()
            .filter_map(|e| e.parse().ok())
            .collect();
        assert_eq!(addrs, &want, "{service}");
    }
    let Ok(config) = opts.config(&cached) else {
        return;
    };
    for (service, cluster) in &config.clusters {
        if let (Target::Mesh { endpoints, .. }, Some(addrs)) =
            (&cluster.target, cached.upstreams.get(service))
        {
            assert_eq!(endpoints, addrs, "{service}'s cluster");
        }
    }
}
