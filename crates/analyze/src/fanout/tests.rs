use super::*;

fn mesh(yaml: &str) -> Mesh {
    Mesh::from_yaml(yaml).unwrap()
}

#[test]
fn unreachable_services_have_no_row() {
    let m = mesh("services:\n  a: { calls: { b: {} } }\n  b: {}\n  c: {}\n");
    assert!(row(&m, "a", "c", Failure::Down).is_none());
    assert!(row(&m, "a", "b", Failure::Down).is_some());
}

#[test]
fn client_retries_multiply_the_whole_request() {
    let m = mesh(
        "defaults: { preset: istio }
services:
  a: { entry: { retries: 2 }, calls: { b: {} } }
  b: { protocol: grpc }
",
    );
    let r = row(&m, "a", "b", Failure::Unavailable).unwrap();
    assert_eq!(r.attempts, 9);
    assert_eq!(r.received.get("a"), Some(&3));
}

#[test]
fn a_hang_is_cut_by_the_callers_window() {
    // b's proxy retries timeouts every 100 ms; a's client gives up after 250 ms, so only
    // three of b's tries toward c start (at 0, 100 and 200 ms) — if the deadline gets there.
    let yaml = "services:
  a: { entry: { timeout: 250ms }, calls: { b: { timeout: none } } }
  b:
    calls:
      c:
        timeout: none
        per_try_timeout: 100ms
        retries: { count: 5, on: [reset], backoff: { strategy: envoy } }
  c: {}
";
    let m = mesh(yaml);
    let r = row(&m, "a", "c", Failure::Hang).unwrap();
    // a's app passes nothing on, so b's proxy never hears of the 250 ms: all 6 tries start,
    // the last 3 after the client has gone.
    assert_eq!((r.attempts, r.late), (6, 3));
    // An app that copies hopwise's headers (or carries trace context) lets the deadline travel.
    for carries in ["hopwise-headers", "trace-context"] {
        let m = mesh(
            &yaml
                .replace("a: {", &format!("a: {{ carries: [{carries}],"))
                .replace("  b:\n", &format!("  b:\n    carries: [{carries}]\n")),
        );
        let r = row(&m, "a", "c", Failure::Hang).unwrap();
        assert_eq!((r.attempts, r.late), (3, 0), "{carries}");
    }
}

#[test]
fn a_grpc_deadline_travels_only_on_grpc_calls() {
    let yaml = "services:
  a: { entry: { timeout: 250ms }, calls: { b: { timeout: none } } }
  b:
    protocol: grpc
    carries: [grpc-deadline]
    calls:
      c:
        timeout: none
        per_try_timeout: 100ms
        retries: { count: 5, on: [reset], backoff: { strategy: fixed, base: 1ms } }
  c: { protocol: PROTO }
";
    let a = "a: { carries: [hopwise-headers],";
    let grpc = mesh(&yaml.replace("PROTO", "grpc").replace("a: {", a));
    assert_eq!(row(&grpc, "a", "c", Failure::Hang).unwrap().late, 0);
    let http = mesh(&yaml.replace("PROTO", "http").replace("a: {", a));
    assert!(row(&http, "a", "c", Failure::Hang).unwrap().late > 0);
}

#[test]
fn unsafe_calls_are_not_retried_by_hopwise() {
    let m = mesh(
        "services:
  a:
    calls:
      b: { method: POST, retries: { on: [connect-failure, 5xx] } }
  b: {}
",
    );
    // Refused connections are retried (nothing was processed)...
    assert_eq!(row(&m, "a", "b", Failure::Down).unwrap().attempts, 3);
    // ...a 503 is not: the payment may have been taken.
    assert_eq!(row(&m, "a", "b", Failure::Http503).unwrap().attempts, 1);
}
