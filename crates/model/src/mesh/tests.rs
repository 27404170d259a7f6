use super::*;
use crate::policy::RetryOn;

fn errors(text: &str) -> Vec<Diagnostic> {
    Mesh::from_yaml(text).expect_err("should be refused").0
}

/// Every problem as `path: message`, one a line.
fn error_text(text: &str) -> String {
    errors(text)
        .iter()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn layers_apply_in_order_and_presets_restart() {
    let mesh = Mesh::from_yaml(
        r"
defaults:
  timeout: 3s
services:
  a:
    preset: istio
    retries: { count: 1 }
    calls:
      b:
        per_try_timeout: 200ms
        routes:
          read: { method: GET, path: /r }
          write: { method: POST, timeout: 1s }
  b: {}
",
    )
    .unwrap();
    let calls: Vec<&Call> = mesh.calls().collect();
    assert_eq!(calls.len(), 2);
    let read = calls[0];
    assert_eq!(read.label(), "a → b/read");
    assert_eq!(read.route_path.as_deref(), Some("/r"));
    // istio restarts the policy: its "no timeout" wins over defaults' 3s.
    assert_eq!(read.policy.timeout, None);
    assert_eq!(read.policy.retry.count, 1);
    assert!(read.policy.retry.on.contains(&RetryOn::Unavailable));
    assert_eq!(read.policy.per_try_timeout, Some(Dur::from_millis(200)));
    assert!(read.idempotent);
    let write = calls[1];
    assert!(!write.idempotent);
    assert_eq!(write.policy.timeout, Some(Dur::from_millis(1000)));
}

#[test]
fn hopwise_is_the_default_and_grpc_is_post() {
    let mesh = Mesh::from_yaml("services:\n  a:\n    calls: { b: {} }\n  b:\n    protocol: grpc\n")
        .unwrap();
    let call = mesh.calls().next().unwrap();
    assert_eq!(call.policy, Preset::Hopwise.policy());
    assert_eq!(call.protocol, Protocol::Grpc);
    assert_eq!(call.method, "POST");
    assert!(!call.idempotent);
    assert_eq!(mesh.entries().len(), 1);
    assert_eq!(mesh.identity("a"), "spiffe://hopwise.local/service/a");
}

#[test]
fn every_problem_is_reported_at_once_with_path_and_line() {
    let errs = errors(
        "services:
  checkout:
    timout: 1s
    calls:
      pricing:
        timeout: 1s
        per_try_timeout: 2s
      nowhere: {}
  pricing:
    retries:
      count: -1
      on: [5xx, sometimes]
    connect_timeout: 0s
    limits: { max_requests: many }
",
    );
    let got: Vec<(usize, &str)> = errs
        .iter()
        .map(|d| (d.pos.unwrap().line, d.path.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "services.checkout.timout"),
            (7, "services.checkout.calls.pricing.per_try_timeout"),
            (8, "services.checkout.calls.nowhere"),
            (11, "services.pricing.retries.count"),
            (12, "services.pricing.retries.on[1]"),
            (13, "services.pricing.connect_timeout"),
            (14, "services.pricing.limits.max_requests"),
        ],
        "{errs:#?}"
    );
    assert!(errs[0].message.contains("did you mean `timeout`"));
    assert!(errs[2].message.contains("not a service in this file"));
}

#[test]
fn cycles_are_refused() {
    let errs = errors(
        "services:\n  a: { calls: { b: {} } }\n  b: { calls: { c: {} } }\n  c: { calls: { a: {} } }\n",
    );
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].path, "services.c.calls.a");
    assert!(
        errs[0].message.contains("a → b → c → a"),
        "{}",
        errs[0].message
    );
    let self_call = errors("services:\n  a: { calls: { a: {} } }\n");
    assert!(self_call[0].message.contains("a → a"));
}

#[test]
fn wrong_types_and_bad_values() {
    let errs = errors(
        "services:
  a:
    timeout: 300
    entry: { timeout: soon }
    retries: { only_if_safe: yes, status_codes: [700], backoff: { base: 100ms, max: 10ms } }
    budget: { ratio: 20 }
    calls: { b: { method: 'GE T' } }
  b: { protocol: smtp }
",
    );
    let msgs: Vec<String> = errs
        .iter()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    let text = msgs.join("\n");
    for want in [
        "services.a.timeout: `300` has no unit",
        "services.a.entry.timeout: `soon`",
        "services.a.retries.only_if_safe: expected `true` or `false`, found a string",
        "services.a.retries.status_codes[0]: 700 is not an HTTP status",
        "services.a.budget.ratio: 20 is not a share",
        "services.a.calls.b.method: `GE T` is not an HTTP method",
        "services.b.protocol: unknown value `smtp`",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn backoff_max_below_base_is_refused() {
    let errs = errors(
        "services:\n  a:\n    retries: { backoff: { base: 100ms, max: 10ms } }\n    calls: { b: {} }\n  b: {}\n",
    );
    assert!(
        errs[0]
            .message
            .contains("back-off max 10ms is shorter than its base 100ms")
    );
}

#[test]
fn empty_and_garbage_documents() {
    assert!(errors("")[0].message.contains("no services"));
    assert!(
        errors("- a\n- b\n")[0]
            .message
            .contains("expected a mapping")
    );
    assert!(
        errors("services: [1, 2]\n")[0]
            .message
            .contains("mapping of names")
    );
    assert!(
        errors("services:\n  Bad_Name: {}\n")[0]
            .message
            .contains("not a valid name")
    );
}

#[test]
fn topology_is_read_and_checked() {
    let mesh = Mesh::from_yaml(
        "services:
  loan:
    copies:
      - { app: 127.0.0.1:8753, inbound: 127.0.0.1:15001, admin: 127.0.0.1:15000, upstreams: { fee: 127.0.0.1:8754 } }
    calls: { fee: {} }
  fee:
    external: { address: localhost:8751, tls: { ca_file: certs/fee-ca.pem } }
",
    )
    .unwrap();
    let loan = &mesh.services["loan"];
    assert_eq!(loan.copies[0].upstreams["fee"].port(), 8754);
    let fee = mesh.services["fee"].external.as_ref().unwrap();
    assert_eq!(fee.tls.as_ref().unwrap().server_name, "localhost");

    let errs = errors(
        "services:
  a:
    copies:
      - { app: nowhere, inbound: 127.0.0.1:1, upstreams: { c: 127.0.0.1:1 } }
    calls: { b: {} }
  b:
    external: { address: b.example }
    calls: { a: {} }
",
    );
    let text: Vec<String> = errs
        .iter()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    let text = text.join("\n");
    for want in [
        "services.a.copies[0].app: `nowhere` is not an address",
        "services.a.copies[0].upstreams.c: a local port for `c`, which a does not call",
        "services.a.copies[0].upstreams.c: 127.0.0.1:1 is already used by services.a.copies[0].inbound",
        "services.b.external.address: `b.example` is not `host:port`",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn authorization_is_read_and_checked() {
    let mesh = Mesh::from_yaml(
        "services:\n  a: { calls: { b: {} } }\n  b: { allow: [a], allow_paths: { /admin: [] } }\n  c: { allow: none }\n",
    )
    .unwrap();
    assert_eq!(mesh.services["b"].allow, Allow::Only(vec!["a".into()]));
    assert_eq!(mesh.services["c"].allow, Allow::Only(vec![]));
    assert_eq!(mesh.services["a"].allow, Allow::Any);
    let text = error_text("services:\n  b: { allow: [ghost], allow_paths: { admin: [b] } }\n");
    assert!(
        text.contains("services.b.allow: allows `ghost`, which is not a service"),
        "{text}"
    );
    assert!(text.contains("`admin` is not a path prefix"), "{text}");
    assert!(
        errors("services:\n  b: { allow: everyone }\n")[0]
            .message
            .contains("unknown value `everyone`")
    );
}

#[test]
fn a_relay_copy_feeds_its_inbound_side_to_its_outbound_side() {
    let ok = Mesh::from_yaml(
        "services:
  checkout:
    copies: [{ inbound: 127.0.0.1:9103, app: 127.0.0.1:9104, upstreams: { pricing: 127.0.0.1:9104 } }]
    calls: { pricing: {} }
  pricing: {}
",
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    // But an app on another copy's port is still a clash.
    let errs = errors(
        "services:
  a:
    copies: [{ app: 127.0.0.1:9104 }, { upstreams: { b: 127.0.0.1:9104 } }]
    calls: { b: {} }
  b: {}
",
    );
    assert!(errs[0].message.contains("already used"), "{errs:?}");
}

#[test]
fn samples_and_counted_copies_are_read_and_checked() {
    let mesh = Mesh::from_yaml(
        "services:
  a: { sample: chain, copies: 3, calls: { b: {} } }
  b: { sample: leaf, copies: [{ app: 127.0.0.1:9001 }] }
  fee: { sample: fee, external: { address: localhost:8751, tls: {} } }
",
    )
    .unwrap();
    let a = &mesh.services["a"];
    assert_eq!(a.sample, Some(SampleKind::Chain));
    assert_eq!((a.copies.len(), a.copies_counted), (3, true));
    assert_eq!(a.copies[2], Copy::default());
    let b = &mesh.services["b"];
    assert_eq!((b.copies.len(), b.copies_counted), (1, false));
    assert_eq!(mesh.services["fee"].sample, Some(SampleKind::Fee));

    let errs = errors(
        "services:
  a: { sample: chian, copies: 0, calls: { b: {} } }
  b: { sample: leaf, copies: yes, calls: { c: {} } }
  c: { sample: fee }
  d: { sample: chain, external: { address: d.example:1 } }
  e: { sample: fee, external: { address: e.example:1 } }
",
    );
    let text: Vec<String> = errs
        .iter()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    let text = text.join("\n");
    for want in [
        "services.a.sample: unknown value `chian`; expected one of `chain`, `leaf`, `fee` — did you mean `chain`?",
        "services.a.copies: 0 copies: write a number from 1 to 100, or a list",
        "services.b.copies: expected a number of copies or a list of copies, found",
        "services.b.sample: the `leaf` sample calls nobody",
        "services.c.sample: the `fee` sample serves TLS itself outside the mesh",
        "services.d.sample: the `chain` sample runs behind a proxy",
        "services.e.sample: the `fee` sample serves TLS: add `tls: {}`",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn path_rules_must_be_canonical() {
    let text = error_text(
        "services:\n  a: { calls: { b: { routes: { r: { path: /x/./y } } } } }\n  b: { allow_paths: { //pay: [a], /p%61y: [a], /a%2Fb: [a] } }\n",
    );
    assert!(
        text.contains("services.b.allow_paths.//pay: `//pay` is not a normalized path"),
        "{text}"
    );
    assert!(text.contains("write `/pay`"), "{text}");
    assert!(
        text.contains("services.a.calls.b.routes.r.path: `/x/./y` is not a normalized path"),
        "{text}"
    );
    assert!(text.contains("`/a%2Fb` cannot be a path prefix"), "{text}");
}

#[test]
fn inbound_caps_are_read_with_safe_defaults() {
    let mesh = Mesh::from_yaml(
        "services:\n  a: {}\n  b: { inbound: { max_requests: 10, max_requests_per_caller: 2, timeout: none } }\n  c: { inbound: { timeout: 2s } }\n",
    )
    .unwrap();
    assert_eq!(mesh.services["a"].inbound, InboundLimits::DEFAULT);
    let b = mesh.services["b"].inbound;
    assert_eq!(
        (b.max_requests, b.max_requests_per_caller, b.timeout),
        (10, 2, None)
    );
    let c = mesh.services["c"].inbound;
    assert_eq!(c.timeout, Some(Dur::from_millis(2000)));
    assert_eq!(c.max_requests, 1024);
    let errs = errors("services:\n  a: { inbound: { max_requests: 0, timeout: 0s, max: 1 } }\n");
    assert_eq!(errs.len(), 3, "{errs:?}");
}
