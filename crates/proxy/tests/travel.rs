//! Issue 13: the seed's chain — frontend → checkout → pricing → inventory, a proxy per service —
//! with real apps in the middle (support/middle.rs) that carry nothing, trace context (W3C, B3,
//! an OpenTelemetry-style child span) or hopwise's headers, over HTTP/1.1 and gRPC, with
//! inventory down, answering 503 / UNAVAILABLE, or hanging, and every layer's list made to retry
//! it (the seed's "common change"). Per row, `hopwise check`'s prediction for the same mesh file
//! beside the attempts that reached inventory (counted by pricing's proxy, which makes them) and
//! those that started after the client gave up: equal. With trace context, at most 3 attempts,
//! and none late; with nothing carried, at most 3 when inventory is down or refuses (the proxies
//! link the apps' failures to their calls by time), while a hang under per-try timeouts still
//! multiplies, as check says (nothing ends the calls of a try its caller gave up on). The proxies are served in process on a paused clock (real sockets, virtual
//! time), so the hanging rows take no real time.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly
#![allow(clippy::print_stderr)] // each row's counts, the figures docs quote

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use hopwise_analyze::Failure;
use hopwise_model::Mesh;
use support::chain::{Chain, checkout};
use support::middle::Passes;
use tokio::time::Instant;

/// How long the client waits (and tells frontend's proxy it waits).
const CLIENT_WAIT: Duration = Duration::from_millis(1000);

fn mesh(grpc: bool, passes: Passes, inventory: SocketAddr) -> String {
    let protocol = if grpc { "grpc" } else { "http" };
    let carries = passes.carries();
    format!(
        "mesh: {{ trust_domain: test.local }}
defaults:
  timeout: 5s
  per_try_timeout: 300ms
  retries:
    count: 2
    on: [connect-failure, refused-stream, reset-before-request, gateway-error, unavailable]
    backoff: {{ strategy: fixed, base: 7ms }}
  # check's count assumes every retry the policy allows is made; the cap on retries in flight
  # at once (3 by default) would refuse some of the hanging rows' overlapping ones
  limits: {{ max_retries: 1000 }}
services:
  frontend:
    entry: {{ timeout: 1s }}
    # the client calls frontend's proxy itself, with its deadline
    carries: [hopwise-headers, grpc-deadline]
    calls: {{ checkout: {{ idempotent: true }} }}
  checkout:
    protocol: {protocol}
    carries: {carries}
    calls: {{ pricing: {{ idempotent: true }} }}
  pricing:
    protocol: {protocol}
    carries: {carries}
    calls: {{ inventory: {{ idempotent: true }} }}
  inventory:
    protocol: {protocol}
    external: {{ address: \"{inventory}\" }}
"
    )
}

/// One row: the chain built, one checkout, what reached inventory (all, and late).
/// Also: the calls the middle apps' proxies ended because their request had gone.
async fn run(grpc: bool, passes: Passes, failure: Failure) -> (u64, u64, usize, Mesh) {
    let chain = Chain::start(|inv| mesh(grpc, passes, inv), passes, grpc, failure).await;
    let start = Instant::now();
    checkout(
        chain.frontend.upstreams["checkout"],
        grpc,
        passes,
        CLIENT_WAIT,
    )
    .await;
    // Everything still running for nobody runs out (virtual time).
    tokio::time::sleep(Duration::from_secs(30)).await;
    let late = chain.arrived_since(start + CLIENT_WAIT);
    let ended = (chain.apps.iter())
        .map(|m| m.caller_gone.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    (chain.attempts(), late, ended, chain.fixture.mesh)
}

async fn table(grpc: bool, failures: [Failure; 3], passes: &[Passes]) {
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    for &p in passes {
        for failure in failures {
            let (attempts, late, ended, mesh) = run(grpc, p, failure).await;
            let predicted =
                hopwise_analyze::fanout::row(&mesh, "frontend", "inventory", failure).unwrap();
            let line = format!(
                "{p:?} {failure:?}: counted {attempts} ({late} late), check {} ({} late)",
                predicted.attempts, predicted.late
            );
            if attempts != predicted.attempts
                || (failure == Failure::Hang && late != predicted.late)
            {
                wrong.push(line.clone());
            }
            let traced = matches!(p, Passes::W3c | Passes::B3 | Passes::Otel);
            if traced && (attempts > 3 || late > 0) {
                wrong.push(format!("{line}: trace context allows at most 3, none late"));
            }
            // A hang: each try the caller gave up on ended the calls made for it, below too.
            if traced && failure == Failure::Hang && ended == 0 {
                wrong.push(format!("{line}: no call ended when its caller went away"));
            }
            eprintln!("{line}");
            report.push(line);
        }
    }
    assert!(
        wrong.is_empty(),
        "check disagrees with the proxies:\n{}\nall rows:\n{}",
        wrong.join("\n"),
        report.join("\n")
    );
    // The default (nothing carried): the 27 before the proxies linked by time.
    assert!(report[0].contains("counted 3 "), "{}", report.join("\n"));
}

#[tokio::test(start_paused = true)]
async fn http_chain_check_predicts_what_the_proxies_do() {
    let failures = [Failure::Down, Failure::Http503, Failure::Hang];
    let passes = [
        Passes::Nothing,
        Passes::W3c,
        Passes::B3,
        Passes::Otel,
        Passes::Hopwise,
    ];
    table(false, failures, &passes).await;
}

#[tokio::test(start_paused = true)]
async fn grpc_chain_check_predicts_what_the_proxies_do() {
    let failures = [Failure::Down, Failure::Unavailable, Failure::Hang];
    let passes = [
        Passes::Nothing,
        Passes::W3c,
        Passes::B3,
        Passes::Hopwise,
        Passes::GrpcDeadline,
    ];
    table(true, failures, &passes).await;
}
