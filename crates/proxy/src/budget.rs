//! The retry budget (Finagle's and Linkerd's): retries are allowed while they stay under
//! `ratio` × the requests of the last `window`, plus `min_per_second` × the window as a floor —
//! the rule is `hopwise_model`'s `Budget::allows`, the one `hopwise check` bounds fan-out with;
//! this file only counts.
//!
//! Counted in ten slots over the window, so old traffic ages out smoothly. The floor is why a
//! budget alone does not stop multiplication at low traffic — see `retries.single_hop`.

use std::sync::Mutex;
use std::time::Duration;

use hopwise_model::Budget;
use tokio::time::Instant;

const SLOTS: usize = 10;

#[derive(Debug)]
struct Slots {
    /// Requests and retries per slot, and the slot index each belongs to.
    requests: [u64; SLOTS],
    retries: [u64; SLOTS],
    epoch: [u64; SLOTS],
}

#[derive(Debug)]
pub struct RetryBudget {
    budget: Budget,
    /// The window counted over (at least one millisecond per slot).
    window: Duration,
    slot: Duration,
    start: Instant,
    slots: Mutex<Slots>,
}

impl RetryBudget {
    pub fn new(b: &Budget) -> Self {
        let window = b.window.get().max(Duration::from_millis(SLOTS as u64));
        RetryBudget {
            budget: *b,
            window,
            slot: window / SLOTS as u32,
            start: Instant::now(),
            slots: Mutex::new(Slots {
                requests: [0; SLOTS],
                retries: [0; SLOTS],
                epoch: [u64::MAX; SLOTS],
            }),
        }
    }

    fn with_slot<T>(&self, f: impl FnOnce(&mut Slots, usize, u64) -> T) -> T {
        let epoch = (self.start.elapsed().as_nanos() / self.slot.as_nanos().max(1)) as u64;
        let i = (epoch % SLOTS as u64) as usize;
        let mut s = match self.slots.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if s.epoch[i] != epoch {
            s.epoch[i] = epoch;
            s.requests[i] = 0;
            s.retries[i] = 0;
        }
        f(&mut s, i, epoch)
    }

    /// Counts a request (a first try).
    pub fn deposit(&self) {
        self.with_slot(|s, i, _| s.requests[i] += 1);
    }

    /// Takes one retry from the budget if there is one left.
    pub fn withdraw(&self) -> bool {
        self.with_slot(|s, i, epoch| {
            let live = |j: usize| epoch.saturating_sub(s.epoch[j]) < SLOTS as u64;
            let (mut requests, mut retries) = (0u64, 0u64);
            for j in 0..SLOTS {
                if live(j) {
                    requests += s.requests[j];
                    retries += s.retries[j];
                }
            }
            if self.budget.allows(requests, retries, self.window) {
                s.retries[i] += 1;
                true
            } else {
                false
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopwise_model::Dur;

    fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
        RetryBudget::new(&Budget {
            ratio,
            min_per_second,
            window: Dur::from_millis(10_000),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stay_under_the_ratio_of_requests() {
        let b = budget(0.2, 0);
        for _ in 0..100 {
            b.deposit();
        }
        let allowed = (0..100).filter(|_| b.withdraw()).count();
        assert_eq!(allowed, 20);
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_allows_retries_at_low_traffic() {
        let b = budget(0.2, 10);
        b.deposit();
        // 10 per second over 10 s: 100 retries even for one request.
        let allowed = (0..1000).filter(|_| b.withdraw()).count();
        assert_eq!(allowed, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn old_traffic_ages_out() {
        let b = budget(0.5, 0);
        for _ in 0..10 {
            b.deposit();
        }
        assert!(b.withdraw());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(
            !b.withdraw(),
            "the window has passed: no requests, no budget"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
        /// Whatever the order of requests and retries, within a window the retries allowed
        /// never exceed ratio × requests + the floor.
        #[test]
        fn never_more_than_the_ratio_plus_the_floor(
            ratio in 0.0f64..1.0,
            min in 0u32..20,
            ops in proptest::collection::vec(proptest::bool::ANY, 0..400),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let (requests, retries) = rt.block_on(async {
                let b = budget(ratio, min);
                let (mut requests, mut retries) = (0u64, 0u64);
                for deposit in ops {
                    if deposit {
                        b.deposit();
                        requests += 1;
                    } else if b.withdraw() {
                        retries += 1;
                    }
                }
                (requests, retries)
            });
            let ceiling = ratio * requests as f64 + f64::from(min) * 10.0;
            proptest::prop_assert!(retries as f64 <= ceiling + 1e-9, "{retries} > {ceiling}");
        }
    }
}
