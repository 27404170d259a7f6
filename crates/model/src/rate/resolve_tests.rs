//! `inbound.rate_limit` read from a mesh file: what it resolves to, and every mistake in it
//! reported at once with its line.

use crate::Mesh;

use super::*;

const SHOP: &str = r"
services:
  frontend:
    calls:
      loans:
        routes:
          apply: { method: POST, path: /apply }
  audit:
    calls: { loans: {} }
  loans:
    inbound:
      rate_limit:
        total: { rate: 100, burst: 20 }
        per_caller: { rate: 10 }
        callers:
          audit: { rate: 1000 }
        routes:
          apply: { rate: 2, burst: 1 }
";

#[test]
fn a_limit_reads_with_burst_defaulting_to_one_seconds_worth() {
    let mesh = Mesh::from_yaml(SHOP).expect("valid");
    let r = &mesh.services["loans"].rate_limit;
    assert_eq!(
        *r,
        RateLimits {
            total: Some(Limit {
                rate: 100,
                burst: 20
            }),
            per_caller: Some(Limit {
                rate: 10,
                burst: 10
            }),
            callers: vec![(
                "audit".into(),
                Limit {
                    rate: 1000,
                    burst: 1000
                }
            )],
            routes: vec![("apply".into(), Limit { rate: 2, burst: 1 })],
        }
    );
    assert!(mesh.services["frontend"].rate_limit.is_empty());
}

#[test]
fn every_mistake_is_reported_with_its_line() {
    let text = r"
services:
  a:
    calls: { b: { routes: { read: { path: /r } } } }
  b:
    inbound:
      rate_limit:
        total: { burst: 5 }
        per_caller: { rate: 0 }
        callers:
          ghost: { rate: 1 }
        routes:
          write: { rate: 1 }
        every_second: 4
";
    let errors = Mesh::from_yaml(text).expect_err("refused").0;
    let at = |path: &str| crate::diag::problem_at(&errors, path);
    let (line, message) = at("services.b.inbound.rate_limit.total");
    assert_eq!(line, Some(8));
    assert!(message.contains("needs `rate`"), "{message}");
    let (line, _) = at("services.b.inbound.rate_limit.per_caller.rate");
    assert_eq!(line, Some(9));
    let (line, message) = at("services.b.inbound.rate_limit.callers.ghost");
    assert_eq!(line, Some(11));
    assert!(message.contains("not a service"), "{message}");
    let (line, message) = at("services.b.inbound.rate_limit.routes.write");
    assert_eq!(line, Some(13));
    assert!(message.contains("calls.b.routes"), "{message}");
    let (line, _) = at("services.b.inbound.rate_limit.every_second");
    assert_eq!(line, Some(14));
}
