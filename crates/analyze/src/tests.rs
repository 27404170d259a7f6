//! The seeds' figures, reproduced from the example files shipped under `examples/seed/`.

use std::time::Duration;

use hopwise_model::Mesh;

use crate::{Failure, Options, Report, Severity, check};

fn report(yaml: &str) -> Report {
    let mesh = Mesh::from_yaml(yaml).unwrap_or_else(|d| panic!("{}", d.render("example")));
    check(&mesh, &Options::default())
}

fn ms(v: u64) -> Option<Duration> {
    Some(Duration::from_millis(v))
}

fn codes(r: &Report) -> Vec<(&str, &str)> {
    r.findings
        .iter()
        .map(|f| (f.code, f.subject.as_str()))
        .collect()
}

fn attempts(r: &Report, service: &str, failure: Failure) -> u64 {
    r.fanout
        .iter()
        .find(|row| row.service == service && row.failure == failure)
        .map(|row| row.attempts)
        .unwrap_or_else(|| panic!("no row for {service} {failure:?}"))
}

#[test]
fn seed_timeout_budget_sample() {
    let r = report(include_str!("../../../examples/seed/timeout-budget.yaml"));
    let worst: Vec<_> = r.timeouts.calls.iter().map(|c| c.worst_case).collect();
    assert_eq!(worst, [ms(9200), ms(3050), ms(1550)]);
    let tries: Vec<_> = r.timeouts.calls.iter().map(|c| c.tries_when_hung).collect();
    assert_eq!(tries, [3, 3, 3]);
    let callee_fit: Vec<_> = r
        .timeouts
        .calls
        .iter()
        .map(|c| c.callee_tries_that_fit)
        .collect();
    assert_eq!(callee_fit, [Some((3, 3)), Some((1, 3)), None]);
    let suggested: Vec<_> = r
        .timeouts
        .calls
        .iter()
        .map(|c| c.largest_fitting_per_try)
        .collect();
    assert_eq!(suggested, [ms(650), None, ms(316)]);
    assert_eq!(r.timeouts.entries[0].worst_case, ms(9200));
    let c = codes(&r);
    for want in [
        ("exceeds-client", "frontend"),
        ("exceeds-caller", "frontend → checkout"),
        ("exceeds-caller", "pricing → inventory"),
        ("no-timeout", "frontend → checkout"),
    ] {
        assert!(c.contains(&want), "missing {want:?} in {c:?}");
    }
    assert!(!c.contains(&("exceeds-caller", "checkout → pricing")));
    assert!(!c.contains(&("no-timeout", "checkout → pricing")));
    let text = crate::render::text(&r);
    for line in [
        "can take 9.20 s when the bottom hangs; its client waits 2.00 s",
        "the client gives frontend 2.00 s in all, but frontend's 3 tries need 9.20 s: none can finish, so all 3 are work nobody waits for",
        "checkout gives pricing 1.00 s per try, but pricing's 3 tries need 1.55 s: only 1 can finish, and the other 2 are work nobody waits for",
        "set per_try_timeout to 650 ms or less",
        "set per_try_timeout to 316 ms or less",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(r.has_errors());
}

#[test]
fn seed_shrinking_timeouts() {
    let r = report(include_str!(
        "../../../examples/seed/shrinking-timeouts.yaml"
    ));
    assert_eq!(r.timeouts.entries[0].worst_case, ms(1475));
    assert!(crate::render::text(&r).contains("worst case 1.48 s"));
    assert!(!r.has_errors(), "{:?}", codes(&r));

    let envoy = report(include_str!(
        "../../../examples/seed/shrinking-timeouts-envoy-backoff.yaml"
    ));
    let pricing = &envoy.timeouts.calls[2];
    assert_eq!(pricing.worst_case, ms(773));
    assert_eq!(pricing.caller_window, ms(800));
    assert_eq!(pricing.tries_that_fit, 3);
    assert!(!envoy.has_errors());
    let thin = envoy
        .findings
        .iter()
        .find(|f| f.code == "thin-margin")
        .unwrap();
    assert!(
        thin.message
            .contains("773 ms of the 800 ms it is given: 27 ms to spare")
    );
}

#[test]
fn seed_retry_chain_under_istio() {
    let grpc = report(include_str!("../../../examples/seed/retry-chain-grpc.yaml"));
    assert_eq!(attempts(&grpc, "inventory", Failure::Down), 27);
    assert_eq!(attempts(&grpc, "inventory", Failure::Unavailable), 27);
    let http = report(include_str!("../../../examples/seed/retry-chain-http.yaml"));
    assert_eq!(attempts(&http, "inventory", Failure::Down), 3);
    assert_eq!(attempts(&http, "inventory", Failure::Http503), 1);
    let retriable = report(include_str!(
        "../../../examples/seed/retry-chain-http-503.yaml"
    ));
    assert_eq!(attempts(&retriable, "inventory", Failure::Http503), 27);
    let app = report(include_str!(
        "../../../examples/seed/retry-chain-app-retries.yaml"
    ));
    assert_eq!(attempts(&app, "inventory", Failure::Http503), 81);
    // The same counts, told as findings where they exceed the threshold.
    assert!(codes(&grpc).contains(&("retry-fanout", "inventory")));
    assert!(!codes(&http).contains(&("retry-fanout", "inventory")));
    // Istio's defaults: no timeout, unlimited caps, unbudgeted retries.
    for code in ["no-timeout", "unbounded-limits", "no-budget"] {
        assert!(http.findings.iter().any(|f| f.code == code), "{code}");
    }
}

#[test]
fn seed_library_double_collection_is_an_error() {
    let r = report(include_str!("../../../examples/seed/library-sidecar.yaml"));
    let unsafe_retries: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.code == "unsafe-retry")
        .collect();
    assert_eq!(
        unsafe_retries.len(),
        1,
        "only the payment, not the balance read"
    );
    assert_eq!(unsafe_retries[0].subject, "loan → fee/pay");
    assert_eq!(unsafe_retries[0].severity, Severity::Error);
    assert!(unsafe_retries[0].message.contains("POST /penalty/pay"));
}

#[test]
fn the_shop_is_clean() {
    let r = report(include_str!("../../../examples/shop/mesh.yaml"));
    assert!(
        r.findings.iter().all(|f| f.severity == Severity::Info),
        "{:?}",
        codes(&r)
    );
    assert!(r.fanout.iter().all(|row| row.attempts <= 3));
}

#[test]
fn hopwise_defaults_do_not_multiply() {
    let r = report(
        "services:
  a: { calls: { b: {} } }
  b: { protocol: grpc, calls: { c: {} } }
  c: { protocol: grpc, calls: { d: {} } }
  d: { protocol: grpc }
",
    );
    for f in [Failure::Down, Failure::Unavailable, Failure::Hang] {
        assert!(attempts(&r, "d", f) <= 3, "{f:?}");
    }
    assert!(!r.has_errors(), "{:?}", codes(&r));
}

#[test]
fn fan_in_and_diamonds_add_up() {
    // a calls b and c; both call d: d receives the attempts of both paths.
    let r = report(
        "defaults: { preset: istio }
services:
  a: { calls: { b: {}, c: {} } }
  b: { protocol: grpc, calls: { d: {} } }
  c: { protocol: grpc, calls: { d: {} } }
  d: { protocol: grpc }
",
    );
    assert_eq!(attempts(&r, "d", Failure::Unavailable), 9 + 9);
    assert_eq!(attempts(&r, "b", Failure::Unavailable), 3);
    // Fan-out from one service to several: each callee is counted on its own.
    assert_eq!(attempts(&r, "c", Failure::Down), 3);
}

#[test]
fn several_entries_are_analysed_separately() {
    let r = report(
        "services:
  web: { entry: { timeout: 1s }, calls: { api: {} } }
  mobile: { entry: { timeout: 5s }, calls: { api: { timeout: 4s } } }
  api: {}
",
    );
    let entries: Vec<_> = r
        .timeouts
        .entries
        .iter()
        .map(|e| e.service.as_str())
        .collect();
    assert_eq!(entries, ["web", "mobile"]);
    // web's call keeps hopwise's 10 s default, which its client's 1 s cannot hold.
    assert!(codes(&r).contains(&("exceeds-client", "web")));
    assert!(!codes(&r).contains(&("exceeds-client", "mobile")));
}

#[test]
fn the_timeout_trap_is_found() {
    let r = report(
        "services:
  pricing:
    preset: istio
    calls: { inventory: { per_try_timeout: 300ms } }
  inventory: {}
",
    );
    let call = &r.timeouts.calls[0];
    assert_eq!((call.tries, call.tries_when_hung), (3, 1));
    assert!(codes(&r).contains(&("timeout-not-retried", "pricing → inventory")));
    let fixed = report(
        "services:
  pricing:
    preset: istio
    calls: { inventory: { per_try_timeout: 300ms, retries: { on: [reset] } } }
  inventory: {}
",
    );
    assert_eq!(fixed.timeouts.calls[0].tries_when_hung, 3);
    assert!(!codes(&fixed).contains(&("timeout-not-retried", "pricing → inventory")));
}

#[test]
fn single_hop_retries_never_multiply_even_when_every_layer_retries_503() {
    // Every layer lists gateway-error (and 503 as a retriable code), as a team "fixing" its
    // error rate would; hopwise's single-hop mark still lets only one hop retry a failure,
    // whatever the apps in the middle carry: their proxies mark their failed answers, linked to
    // the calls that failed by trace context or by time.
    let yaml = "defaults:
  retries: { count: 2, on: [connect-failure, gateway-error, retriable-status-codes], status_codes: [503] }
services:
  frontend: { calls: { checkout: {} } }
  checkout: { CARRIES calls: { pricing: {} } }
  pricing: { CARRIES calls: { inventory: {} } }
  inventory: {}
";
    for carries in ["carries: [trace-context],", ""] {
        let r = report(&yaml.replace("CARRIES", carries));
        assert_eq!(attempts(&r, "inventory", Failure::Http503), 3, "{carries}");
        assert_eq!(attempts(&r, "inventory", Failure::Down), 3, "{carries}");
        assert!(!codes(&r).contains(&("retry-fanout", "inventory")));
        assert!(!r.has_errors(), "{:?}", codes(&r));
    }
    // The same file with the mark switched off multiplies as the seed says.
    let seed = report(
        "defaults:
  retries: { count: 2, on: [connect-failure, gateway-error], single_hop: false }
services:
  frontend: { calls: { checkout: {} } }
  checkout: { calls: { pricing: {} } }
  pricing: { calls: { inventory: {} } }
  inventory: {}
",
    );
    assert_eq!(attempts(&seed, "inventory", Failure::Http503), 27);
}

/// A gateway (`services.<name>.gateway`, issue 29) is a caller as any other: nothing calls it,
/// so it is an entry, and its calls' timeouts and retries are counted down the chain.
#[test]
fn a_gateway_is_counted_as_the_caller_it_is() {
    let r = report(
        "
services:
  edge:
    gateway: { http: { listen: 127.0.0.1:0 } }
    routes: { shop: { rules: [{ backends: [{ service: web }] }] } }
    calls: { web: { timeout: 3s, retries: { count: 2 } } }
  web: { allow: [edge], calls: { db: { timeout: 1s } } }
  db: {}
",
    );
    let call = &r.timeouts.calls[0];
    assert_eq!(
        (call.call.as_str(), call.timeout, call.tries),
        ("edge → web", ms(3000), 3)
    );
    assert_eq!(r.timeouts.entries[0].service, "edge");
    // web down: the gateway's two retries of a connection failure reach it three times.
    assert_eq!(attempts(&r, "web", Failure::Down), 3);
    assert!(!r.has_errors(), "{:?}", codes(&r));
}
