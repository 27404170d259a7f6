//! A label subset's copies (a route backend's or mirror's `subset: { version: v2 }`): a view of
//! the whole upstream's [`Endpoints`] holding the same copies — so load, latency and ejections
//! are one per copy whichever set picked it — filtered once, when the copies or the
//! configuration change, never per request. A request to a subset is balanced over its view
//! exactly as one to the whole service is over the whole (P2C, ejection, the copies it tried).

use hopwise_model::labels::{self, Labels};

use super::Endpoints;

impl Endpoints {
    /// The copies of `whole` that carry every label of `subset`, balanced as `whole` is.
    pub fn view(whole: &Endpoints, subset: &Labels) -> Endpoints {
        Endpoints::of(picked(whole, subset), whole.balancer, whole.outlier)
    }

    /// Brings this view of `subset` up to `whole`'s copies now.
    pub fn refresh(&self, whole: &Endpoints, subset: &Labels) {
        self.set(picked(whole, subset));
    }
}

fn picked(whole: &Endpoints, subset: &Labels) -> Vec<std::sync::Arc<super::Endpoint>> {
    (whole.snapshot().iter())
        .filter(|e| labels::carries(&e.labels, subset))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use hopwise_model::{Balancer, Dur, Outlier};

    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn version(v: &str) -> Labels {
        [("version".to_owned(), v.to_owned())].into()
    }

    /// Copies 1 and 2 are v1, 3 and 4 v2, 5 has no label.
    fn whole() -> Endpoints {
        let e = Endpoints::new(&[], Balancer::LeastRequests, None);
        let addrs: Vec<_> = (1..=5).map(addr).collect();
        let labels: BTreeMap<_, _> = (1..=4)
            .map(|p| (addr(p), version(if p <= 2 { "v1" } else { "v2" })))
            .collect();
        e.update_labelled(&addrs, &labels);
        e
    }

    fn addrs(e: &Endpoints) -> Vec<SocketAddr> {
        e.snapshot().iter().map(|e| e.addr).collect()
    }

    #[test]
    fn a_view_holds_the_copies_carrying_the_subset_and_shares_them() {
        let whole = whole();
        let v2 = Endpoints::view(&whole, &version("v2"));
        assert_eq!(addrs(&v2), [addr(3), addr(4)]);
        assert!(Arc::ptr_eq(&v2.snapshot()[0], &whole.snapshot()[2]));
        assert!(addrs(&Endpoints::view(&whole, &version("v9"))).is_empty());
        for _ in 0..50 {
            let first = v2.pick(&[]).unwrap().addr;
            assert!([addr(3), addr(4)].contains(&first));
            // A retry goes to the other copy of the subset, never out of it.
            assert_eq!(
                v2.pick(&[first]).unwrap().addr,
                if first == addr(3) { addr(4) } else { addr(3) }
            );
        }
    }

    #[test]
    fn a_view_follows_the_copies_and_their_labels() {
        let whole = whole();
        let v1 = Endpoints::view(&whole, &version("v1"));
        // Copy 2 becomes v2, copy 6 joins as v1, copy 1 leaves.
        let labels: BTreeMap<_, _> = [(2, "v2"), (3, "v2"), (4, "v2"), (6, "v1")]
            .into_iter()
            .map(|(p, v)| (addr(p), version(v)))
            .collect();
        let kept = whole.snapshot()[2].clone();
        whole.update_labelled(&[2, 3, 4, 5, 6].map(addr), &labels);
        v1.refresh(&whole, &version("v1"));
        assert_eq!(addrs(&v1), [addr(6)]);
        assert!(
            Arc::ptr_eq(&whole.snapshot()[1], &kept),
            "copy 3 kept what is known of it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ejection_through_a_view_is_the_copys_everywhere() {
        let outlier = Some(Outlier {
            consecutive_gateway_failures: 5,
            base_ejection_time: Dur::from_millis(30_000),
            max_ejection_percent: 50,
        });
        let whole = Endpoints::new(&[], Balancer::RoundRobin, outlier);
        let labels = [(addr(1), version("v1")), (addr(2), version("v1"))].into();
        whole.update_labelled(&[addr(1), addr(2), addr(3)], &labels);
        let v1 = Endpoints::view(&whole, &version("v1"));
        let first = v1.snapshot()[0].clone();
        for _ in 0..5 {
            v1.record(&first, Duration::from_millis(1), true);
        }
        assert_eq!(v1.ejected_count(), 1);
        assert_eq!(
            whole.ejected_count(),
            1,
            "the same copy, ejected for the whole too"
        );
        for _ in 0..20 {
            assert_eq!(v1.pick(&[]).unwrap().addr, addr(2));
        }
    }
}
