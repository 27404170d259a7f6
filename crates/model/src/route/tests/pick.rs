//! Table tests of `pick_backend` and mirroring: httproute-weight and grpcroute-weight (70/30/0)
//! as exact counts over every draw of one period, weight 0, all weights 0 (the spec's 500).

use super::super::*;

fn split(weights: &[(&str, u32)]) -> Rule {
    Rule {
        backends: weights
            .iter()
            .map(|(s, w)| Backend::service(s).weight(*w))
            .collect(),
        ..Rule::default()
    }
}

fn counts(rule: &Rule, draws: impl Iterator<Item = u32>) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = rule
        .backends
        .iter()
        .map(|b| (b.target.service.clone(), 0))
        .collect();
    for d in draws {
        if let Pick::Backend(b) = pick_backend(rule, d) {
            let i = rule
                .backends
                .iter()
                .position(|x| std::ptr::eq(x, b))
                .unwrap();
            out[i].1 += 1;
        }
    }
    out
}

#[test]
fn conformance_weight_70_30_0() {
    let rule = split(&[("v1", 70), ("v2", 30), ("v3", 0)]);
    let want = vec![("v1".into(), 70), ("v2".into(), 30), ("v3".into(), 0)];
    assert_eq!(counts(&rule, 0..100), want);
    // Any run of 100 consecutive draws, wherever it starts (draws are taken modulo the sum).
    assert_eq!(counts(&rule, 1_000_000..1_000_100), want);
}

#[test]
fn zero_weights_take_nothing_and_all_zero_is_no_backend() {
    assert_eq!(
        pick_backend(&split(&[("v1", 0), ("v2", 0)]), 7),
        Pick::NoBackend
    );
    assert_eq!(pick_backend(&split(&[]), 0), Pick::NoBackend);
    let rule = split(&[("v1", 0), ("v2", 1), ("v3", 0)]);
    for d in [0, 1, 99, u32::MAX] {
        assert_eq!(pick_backend(&rule, d), Pick::Backend(&rule.backends[1]));
    }
}

#[test]
fn large_weights_do_not_overflow() {
    let rule = split(&[("a", u32::MAX), ("b", u32::MAX)]);
    assert_eq!(
        pick_backend(&rule, u32::MAX),
        Pick::Backend(&rule.backends[1])
    );
    assert_eq!(
        pick_backend(&rule, u32::MAX - 1),
        Pick::Backend(&rule.backends[0])
    );
}

#[test]
fn a_mirror_takes_its_percentage_of_draws() {
    let mirror = |percent| Mirror {
        target: Backend::service("shadow").target,
        percent,
    };
    for p in [0, 1, 42, 100] {
        let m = mirror(p);
        assert_eq!((0..100).filter(|d| m.takes(*d)).count(), usize::from(p));
    }
}
