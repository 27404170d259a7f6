//! A rule's `retry` and `timeouts` in what `check` reports: the call to the rule's backend is
//! counted at the worst of its own policy and the rule's over it.

use hopwise_model::Mesh;

use crate::fanout::{Failure, row};

/// `a` calls the parent `p` and the backend `b`; `p`'s rule sends `/flaky` to `b` retrying
/// 503 three times, which `a`'s call to `b` (hopwise's defaults) does not.
const MESH: &str = r#"
services:
  a:
    calls: { p: {}, b: { timeout: 3s } }
  p:
    routes:
      r:
        rules:
          - matches: [{ path: { value: /flaky } }]
            timeouts: { request: 1s, backend_request: 200ms }
            retry: { attempts: 3, backoff: 10ms, codes: [503] }
            backends: [{ service: b }]
          - backends: [{ service: b }]
  b: {}
"#;

#[test]
fn a_rules_retries_count_in_the_calls_tries_and_attempts() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let r = row(&mesh, "a", "b", Failure::Http503).unwrap();
    assert_eq!(r.attempts, 4, "the first try and the rule's 3 retries");
    assert_eq!(r.tries["a → b"], 4);

    let t = crate::timeouts::analyze(&mesh);
    let call = t.calls.iter().find(|c| c.call == "a → b").unwrap();
    assert_eq!(call.tries, 4, "the most any policy of the call makes");
    // Hung: the rule's 200 ms tries are retried (a timeout is) within its 1 s; the call's own
    // policy makes one try of up to 3 s, which is longer: that is the worst case reported.
    assert_eq!(call.worst_case.map(|d| d.as_millis()), Some(3000));
}

#[test]
fn without_a_rule_policy_the_call_is_counted_as_before() {
    let plain = MESH
        .replace(
            "            timeouts: { request: 1s, backend_request: 200ms }\n",
            "",
        )
        .replace(
            "            retry: { attempts: 3, backoff: 10ms, codes: [503] }\n",
            "",
        );
    let mesh = Mesh::from_yaml(&plain).unwrap();
    assert_eq!(row(&mesh, "a", "b", Failure::Http503).unwrap().attempts, 1);
}
