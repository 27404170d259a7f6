//! `hopwise up --captured` of the shop for real (docs/up.md, "Captured"): every sample copy in
//! its own network namespace, calling its callees by name. A request at the front door answers
//! through every service, and the proxies of frontend, checkout and pricing each carried
//! captured connections to a service (`hopwise_captured_connections_total{outcome="service"}`):
//! the apps reached their callees by name through their proxies, as no local port per callee
//! exists. Ctrl-C leaves no namespace, link, hosts directory or record of the run; a SIGKILLed
//! `up` leaves its namespaces, and the next `up` (captured by `mesh.capture.up: true` this
//! time) removes them before it starts.
//!
//! As in `capture.rs`, everything runs inside a namespace the test made ([`Host`]): the copies'
//! namespaces hang off it, and every address used is assigned inside namespaces of the test.
//! The run directory (`.hopwise/shop` under a temporary directory) and the records
//! (`--state`) are the test's own, so parallel tests cannot see each other's runs, and only
//! ids this test's runs recorded are checked. Needs root, `ip`, `nft` and `nsenter`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;
use common::captured::{assert_nothing_left, captured_to_services, get, recorded, start_up};
use common::netns::Host;
use common::up::shop;

use std::net::SocketAddr;
use std::path::Path;

fn samples(cwd: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(cwd.join(".hopwise/shop/samples.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn addr(v: &serde_json::Value) -> SocketAddr {
    v.as_str().unwrap().parse().unwrap()
}

#[test]
fn the_shop_captured_answers_through_every_service_by_name_and_leaves_nothing() {
    let host = Host::new();
    let dir = tempfile::tempdir().unwrap();
    let (cwd, state) = (dir.path(), dir.path().join("state"));

    let shop = shop();
    let mut up = start_up(&host, cwd, &state, "up1.stderr", &shop, &["--captured"]);
    let ids = recorded(&state);
    assert_eq!(ids.len(), 5, "a namespace per sample copy: {ids:?}");
    let s = samples(cwd);
    let front = &s["services"]["frontend"]["copies"][0];
    let app = addr(&front["app"]);
    assert!(
        !app.ip().is_loopback(),
        "the host reaches a captured app in its namespace: {app}"
    );
    for _ in 0..4 {
        let answer = get(&host, app, "/");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""to":"checkout""#), "{answer}");
    }
    // Every caller's app reached its callee by name, through its proxy's capture listener.
    let admin = |svc: &str, copy: usize| addr(&s["services"][svc]["copies"][copy]["admin"]);
    assert!(captured_to_services(&host, admin("frontend", 0)) > 0);
    assert!(captured_to_services(&host, admin("checkout", 0)) > 0);
    let pricing = captured_to_services(&host, admin("pricing", 0))
        + captured_to_services(&host, admin("pricing", 1));
    assert!(pricing > 0, "pricing called inventory by name");
    assert_eq!(
        captured_to_services(&host, admin("inventory", 0)),
        0,
        "inventory calls nobody"
    );

    let status = up.signal(nix::sys::signal::Signal::SIGINT);
    assert!(status.success(), "up after Ctrl-C: {status}");
    assert_nothing_left(&host, &state, &ids);

    // A SIGKILLed `up` cannot clean up: its namespaces stay, recorded.
    let mut killed = start_up(&host, cwd, &state, "up2.stderr", &shop, &["--captured"]);
    let crashed = recorded(&state);
    assert_eq!(crashed.len(), 5, "{crashed:?}");
    let _ = killed.signal(nix::sys::signal::Signal::SIGKILL);
    for id in &crashed {
        assert!(
            Path::new(&format!("/run/netns/hopwise-{id}")).exists(),
            "the killed up's namespace {id} is there for the next up to remove"
        );
    }
    // The next `up` removes all of it before it starts, and its own when it stops. This one
    // is captured by the mesh file's switch instead of the flag.
    let text = std::fs::read_to_string(&shop).unwrap();
    let switched = text.replace(
        "  trust_domain: shop.local\n",
        "  trust_domain: shop.local\n  capture: { up: true }\n",
    );
    assert_ne!(switched, text, "the shop's mesh section moved");
    let file = cwd.join("shop.yaml");
    std::fs::write(&file, switched).unwrap();
    let mut next = start_up(&host, cwd, &state, "up3.stderr", &file, &[]);
    assert_nothing_left(&host, &state, &crashed);
    let log = std::fs::read_to_string(cwd.join("up3.stderr")).unwrap();
    for id in &crashed {
        assert!(
            log.contains(&format!("dead captured run {id} left")),
            "{log}"
        );
    }
    let own = recorded(&state);
    assert_eq!(own.len(), 5, "{own:?}");
    assert!(
        get(
            &host,
            addr(&samples(cwd)["services"]["frontend"]["copies"][0]["app"]),
            "/"
        )
        .starts_with("HTTP/1.1 200")
    );
    let status = next.signal(nix::sys::signal::Signal::SIGINT);
    assert!(status.success(), "{status}");
    assert_nothing_left(&host, &state, &own);
}
