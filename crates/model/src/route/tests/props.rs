//! Properties: a weighted pick over draws `0..sum` gives each backend exactly its weight; a
//! `PathPrefix` rule never takes a path outside its prefix's segment boundary, and always takes
//! the paths under it.

use proptest::prelude::*;

use super::super::*;
use super::{prefix, route, rule, to};

proptest! {
    #[test]
    fn a_pick_over_one_period_hits_each_backend_its_weight(
        weights in prop::collection::vec(0u32..50, 0..8),
        offset in 0u32..1000,
    ) {
        let rule: Rule = Rule {
            backends: weights.iter().map(|w| Backend::service("s").weight(*w)).collect(),
            ..Rule::default()
        };
        let total: u32 = weights.iter().sum();
        let mut hits = vec![0u32; weights.len()];
        for d in 0..total {
            // Any period: draws are taken modulo the sum.
            match pick_backend(&rule, d + offset * total) {
                Pick::Backend(b) => {
                    hits[rule.backends.iter().position(|x| std::ptr::eq(x, b)).unwrap()] += 1;
                }
                Pick::NoBackend => prop_assert!(false, "a draw below a non-zero sum"),
            }
        }
        prop_assert_eq!(hits, weights.clone());
        if total == 0 {
            prop_assert_eq!(pick_backend(&rule, offset), Pick::NoBackend);
        }
    }

    #[test]
    fn a_prefix_takes_exactly_the_paths_under_its_segments(
        segments in prop::collection::vec("[a-c]{1,3}", 1..4),
        path in "(/[a-c]{0,3}){1,5}",
    ) {
        let p = format!("/{}", segments.join("/"));
        let routes = [route(vec![rule("in", vec![prefix(&p)])])];
        let canonical = crate::path::normalize(&path).unwrap().into_owned();
        let under = canonical == p || canonical.starts_with(&format!("{p}/"));
        let got = to(&routes, None, "GET", &path, &[]);
        prop_assert_eq!(got.is_some(), under, "prefix {} path {} ({})", p, path, canonical);
        // The trailing `/` of a prefix changes nothing.
        let routes = [route(vec![rule("in", vec![prefix(&format!("{p}/"))])])];
        prop_assert_eq!(to(&routes, None, "GET", &path, &[]).is_some(), under);
    }
}
