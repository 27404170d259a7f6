//! What a request gets from a fault, by its draws and its header; and every mistake in a
//! `fault` block reported with its line.

use super::*;
use crate::Mesh;

fn fault(yaml: &str) -> Fault {
    let text = format!("services:\n  a:\n    fault: {yaml}\n  g:\n    protocol: grpc\n");
    let mesh = Mesh::from_yaml(&text).unwrap_or_else(|d| panic!("{}", d.render("test")));
    mesh.services["a"].fault.clone().expect("a fault")
}

#[test]
fn each_fault_takes_exactly_its_share_of_the_draws() {
    let f = fault("{ delay: { time: 2s, percent: 30 }, abort: { status: 503, percent: 10 } }");
    let (mut delayed, mut aborted) = (0, 0);
    for draw in 0..100 {
        let i = f.decide(false, draw, draw + 1000);
        if let Some(d) = i.delay {
            assert_eq!(d, Duration::from_secs(2));
            delayed += 1;
        }
        if let Some(a) = i.abort {
            assert_eq!(a, Answer::Http(503));
            aborted += 1;
        }
    }
    assert_eq!((delayed, aborted), (30, 10));
    // Percent defaults to every request.
    let all = fault("{ abort: { status: 500 } }");
    assert!((0..100).all(|d| all.decide(false, d, d).abort == Some(Answer::Http(500))));
}

#[test]
fn a_fault_with_a_header_touches_only_requests_that_carry_it() {
    let f = fault("{ abort: { status: 503 }, header: { name: X-Chaos, value: \"on\" } }");
    assert_eq!(f.decide(false, 0, 0), Injected::default());
    assert_eq!(f.decide(true, 0, 0).abort, Some(Answer::Http(503)));
    let (name, value) = f.header.clone().unwrap();
    assert_eq!(
        (name.as_str(), value.map(|v| v.as_str().to_owned())),
        ("x-chaos", Some("on".into()))
    );
}

#[test]
fn every_mistake_is_reported_with_its_line() {
    let text = r#"
services:
  a:
    fault:
      delay: { percent: 10 }
      abort: { grpc: unavailable }
      header: { name: "bad name", value: "x" }
  b:
    fault: { abort: { status: 99 } }
  g:
    protocol: grpc
    fault: { abort: { grpc: sleepy, percent: 101 } }
"#;
    let errors = Mesh::from_yaml(text).expect_err("refused").0;
    let at = |path: &str| crate::diag::problem_at(&errors, path);
    let (line, message) = at("services.a.fault.delay");
    assert_eq!(line, Some(5));
    assert!(message.contains("`time`"), "{message}");
    let (line, message) = at("services.a.fault.abort");
    assert_eq!(line, Some(6));
    assert!(message.contains("HTTP service"), "{message}");
    assert_eq!(at("services.a.fault.header.name").0, Some(7));
    assert_eq!(at("services.b.fault.abort.status").0, Some(9));
    assert_eq!(at("services.g.fault.abort.percent").0, Some(12));
    let (line, message) = at("services.g.fault.abort.grpc");
    assert_eq!(line, Some(12));
    assert!(message.contains("unavailable"), "{message}");
}
