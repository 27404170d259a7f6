//! A round trip with real proxies: `hopwise convert` on the seed's gRPC chain written as Istio
//! configuration (`examples/import/istio-retry-chain/`), `hopwise check` on each file it writes
//! (the converted one and the fixed one beside it), then each file run with hopwise's real
//! proxies as `hopwise demo retry-chain` runs its rows — frontend's proxy, then checkout's and
//! pricing's as relays (each one's inbound side feeding its own outbound side), inventory a
//! sample that fails at once — and the attempts counted at the bottom (the tries pricing's
//! proxy makes toward inventory, and what inventory receives) equal what `check` predicted.
//! Only the placement (addresses, certificates) is added to the written files. Converted: 27 and
//! 27 (UNAVAILABLE, down); fixed: 1 and 3.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use hopwise_lab::processes::ports::hold;
use hopwise_lab::processes::proxies::{Proxies, scrape};
use hopwise_lab::samples::inventory::{Inventory, InventoryFails};
use hopwise_lab::samples::wire;
use http::{Request, header};
use http_body_util::Full;

const IMPORT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/import");
const HOPWISE: &str = env!("CARGO_BIN_EXE_hopwise");
/// Requests sent into frontend's proxy per file and failure.
const CHECKOUTS: u64 = 2;

fn hopwise(args: &[&str]) -> std::process::Output {
    Command::new(HOPWISE)
        .timeout(Duration::from_secs(60))
        .args(args)
        .output()
        .unwrap()
}

/// `hopwise convert` into `dir`: the converted file and the fixed one, and what it said.
fn convert(dir: &Path) -> (PathBuf, PathBuf, String) {
    let out = dir.join("mesh.yaml");
    let o = hopwise(&[
        "convert",
        "--from",
        &format!("{IMPORT}/istio-retry-chain"),
        "--calls",
        &format!("{IMPORT}/istio-retry-chain/calls.txt"),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    (out, dir.join("mesh.fixed.yaml"), err)
}

/// What `hopwise check` predicts at inventory for `failure` (`down`, `unavailable`).
fn predicted(file: &Path, failure: &str) -> u64 {
    let o = hopwise(&["check", "--format", "json", file.to_str().unwrap()]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    report["fanout"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["service"] == "inventory" && r["failure"] == failure && r["entry"] == "frontend"
        })
        .and_then(|r| r["attempts"].as_u64())
        .unwrap_or_else(|| panic!("no row for inventory {failure}: {report:#}"))
}

/// The listeners of one chain, as the demo places it.
struct Ports {
    frontend_out: SocketAddr,
    frontend_admin: SocketAddr,
    checkout_in: SocketAddr,
    checkout_relay: SocketAddr,
    checkout_admin: SocketAddr,
    pricing_in: SocketAddr,
    pricing_relay: SocketAddr,
    pricing_admin: SocketAddr,
}

/// The written file with its placement: certificates, each service's copy, inventory's address.
fn placed(text: &str, p: &Ports, inventory: SocketAddr) -> String {
    let add = |text: String, after: &str, lines: String| {
        assert!(text.contains(after), "no {after:?} in\n{text}");
        text.replacen(after, &format!("{after}{lines}"), 1)
    };
    let t = add(
        text.to_owned(),
        "\nmesh:\n",
        "  trust_domain: convert.local\n  certs: certs\n".to_owned(),
    );
    let t = add(
        t,
        "\n  frontend:\n",
        format!(
            "    copies: [{{ upstreams: {{ checkout: \"{}\" }}, admin: \"{}\" }}]\n",
            p.frontend_out, p.frontend_admin
        ),
    );
    let relay = |inbound, relay, callee, admin| {
        format!(
            "    copies: [{{ inbound: \"{inbound}\", app: \"{relay}\", upstreams: {{ {callee}: \"{relay}\" }}, admin: \"{admin}\" }}]\n"
        )
    };
    let t = add(
        t,
        "\n  checkout:\n",
        relay(p.checkout_in, p.checkout_relay, "pricing", p.checkout_admin),
    );
    let t = add(
        t,
        "\n  pricing:\n",
        relay(p.pricing_in, p.pricing_relay, "inventory", p.pricing_admin),
    );
    add(
        t,
        "\n  inventory:\n",
        format!("    external: {{ address: \"{inventory}\" }}\n"),
    )
}

/// One checkout over gRPC into frontend's proxy.
async fn checkout(frontend: SocketAddr) {
    let req = Request::builder()
        .method("POST")
        .uri("http://checkout/shop.Checkout/Buy")
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .body(Full::new(wire::grpc_frame(b"\x0a\x06sku-42")))
        .unwrap();
    let r = wire::send_h2c(frontend, req).await.unwrap();
    assert_ne!(
        r.header("grpc-status"),
        Some("0"),
        "inventory failed, yet it answered OK"
    );
}

/// The tries pricing's proxy made toward inventory per checkout, and what inventory received
/// per checkout (when it is up to count), running `text` with real proxies.
async fn measured(dir: &Path, text: &str, fails: InventoryFails) -> (u64, Option<u64>) {
    let inventory = Inventory::start(fails).await.unwrap();
    let held = hold(8).unwrap();
    let a = held.addrs().to_vec();
    let p = Ports {
        frontend_out: a[0],
        frontend_admin: a[1],
        checkout_in: a[2],
        checkout_relay: a[3],
        checkout_admin: a[4],
        pricing_in: a[5],
        pricing_relay: a[6],
        pricing_admin: a[7],
    };
    let yaml = placed(text, &p, inventory.addr);
    let mesh = hopwise_model::Mesh::from_yaml(&yaml)
        .unwrap_or_else(|d| panic!("{}\n{yaml}", d.render("mesh.yaml")));
    let path = dir.join("placed.yaml");
    std::fs::write(&path, &yaml).unwrap();
    hopwise_proxy::certs::write_dev_certs(&mesh, &dir.join("certs")).unwrap();
    let mut proxies = Proxies::new(Path::new(HOPWISE), dir);
    for (service, admin) in [
        ("pricing", p.pricing_admin),
        ("checkout", p.checkout_admin),
        ("frontend", p.frontend_admin),
    ] {
        proxies.start(&path, service, admin).await.unwrap();
    }
    for _ in 0..CHECKOUTS {
        checkout(p.frontend_out).await;
    }
    let m = scrape(p.pricing_admin).await.unwrap();
    let tries = m.sum(
        "hopwise_tries_total",
        &[("direction", "outbound"), ("service", "inventory")],
    );
    proxies.stop();
    (
        tries / CHECKOUTS,
        inventory.received().map(|n| n / CHECKOUTS),
    )
}

#[test]
fn converted_and_fixed_files_measure_what_check_predicts() {
    let dir = tempfile::tempdir().unwrap();
    let (converted, fixed, said) = convert(dir.path());
    // The output says which file is which.
    assert!(
        said.contains("mesh.yaml: the configuration as it is"),
        "{said}"
    );
    assert!(
        said.contains("mesh.fixed.yaml: the same with check's"),
        "{said}"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut figures = Vec::new();
    // The fixed file: the calls above the bottom stop retrying, and the bottom call, a gRPC POST,
    // retries UNAVAILABLE (the callee may have acted) no more: 3 when down, 1 when UNAVAILABLE.
    for (file, expect) in [(&converted, [27, 27]), (&fixed, [1, 3])] {
        let text = std::fs::read_to_string(file).unwrap();
        for ((fails, failure), expect) in [
            (InventoryFails::Unavailable, "unavailable"),
            (InventoryFails::Down, "down"),
        ]
        .into_iter()
        .zip(expect)
        {
            let predicted = predicted(file, failure);
            assert_eq!(predicted, expect, "{}: {failure}", file.display());
            let run = dir.path().join(format!(
                "{}-{failure}",
                file.file_stem().unwrap().to_string_lossy()
            ));
            std::fs::create_dir_all(&run).unwrap();
            let (tries, received) = rt.block_on(measured(&run, &text, fails));
            figures.push((
                file.file_name().unwrap().to_owned(),
                failure,
                predicted,
                tries,
                received,
            ));
            assert_eq!(
                tries,
                predicted,
                "{}: {failure}: {figures:?}",
                file.display()
            );
            if let Some(received) = received {
                assert_eq!(received, predicted, "{}: {failure}", file.display());
            }
        }
    }
    eprintln!("predicted against measured: {figures:?}");
}
