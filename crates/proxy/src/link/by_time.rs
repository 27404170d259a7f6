//! The time link ([`super`]'s "without trace context"): answers to the app's calls that came
//! back retried and failed, linked to no request, each a token; a failed answer of the app's
//! claims one produced during its request's life, and is marked "retries exhausted" by it.
//!
//! Why tokens and not "any such answer during the request's life": with many requests in
//! flight, a request that fails for a reason of its own would be marked (and not retried above)
//! whenever any neighbour's call had failed meanwhile. A pass-through app answers each failed
//! call with one failure, so one token per failure marks every one of them; another failure
//! is marked only when it claims a token in the short time between a call's failed answer and
//! the app's answer that passes it up. Claims take the oldest token a request may claim: each
//! failure's own token is then still there for it (a token is claimable by exactly the requests
//! in flight when it was made, a suffix of the tokens for each, so oldest-first never takes one
//! a later failure needed when another would have done).
//!
//! Bounds: at most `cap` tokens wait (the proxy's inbound cap); past it the oldest goes. An app
//! that swallows a failed call leaves its token to a request that was in flight with it.
//! Pure: no clock, no I/O.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The copy's tokens.
#[derive(Debug)]
pub(super) struct ByTime {
    /// Tokens made, ever: a request reads it as it begins ([`ByTime::now`]); the tokens it
    /// may claim are those made after.
    made: AtomicU64,
    unclaimed: Mutex<VecDeque<Token>>,
    cap: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Token {
    /// Its place in `made`'s count (from 1).
    number: u64,
    /// The tries the failed call made: the mark's value.
    tries: u32,
}

impl ByTime {
    pub(super) fn new(cap: usize) -> ByTime {
        ByTime {
            made: AtomicU64::new(0),
            unclaimed: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
        }
    }

    /// The count of tokens made so far: read as a request begins, before the app sees it.
    pub(super) fn now(&self) -> u64 {
        self.made.load(Ordering::Acquire)
    }

    /// Whether a token was made since `since` (one load: most requests stop here).
    pub(super) fn made_since(&self, since: u64) -> bool {
        self.now() != since
    }

    /// A call linked to no request came back retried and failed after `tries` tries.
    pub(super) fn make(&self, tries: u32) {
        let mut q = self.lock();
        // Numbered under the lock, so the queue stays in order.
        let number = self.made.load(Ordering::Relaxed) + 1;
        if q.len() == self.cap {
            q.pop_front();
        }
        q.push_back(Token { number, tries });
        self.made.store(number, Ordering::Release);
    }

    /// A failed answer to a request that began at `since` ([`ByTime::now`]): the tries of the
    /// token it claims, if one made since is unclaimed.
    pub(super) fn claim(&self, since: u64) -> Option<u32> {
        // Nothing made during its life: no lock (every request that fails on its own, alone).
        if self.now() == since {
            return None;
        }
        let mut q = self.lock();
        let at = q.iter().position(|t| t.number > since)?;
        q.remove(at).map(|t| t.tries)
    }

    /// Tokens waiting to be claimed.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Token>> {
        // A panic elsewhere while holding it leaves a queue that is still whole.
        self.unclaimed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_failure_claims_only_a_token_made_during_its_life() {
        let t = ByTime::new(8);
        t.make(3);
        let since = t.now();
        assert_eq!(t.claim(since), None, "made before it began");
        t.make(2);
        assert_eq!(t.claim(since), Some(2));
        assert_eq!(t.claim(since), None, "each token marks one failure");
        assert_eq!(t.waiting(), 1);
    }

    #[test]
    fn the_oldest_tokens_go_past_the_cap() {
        let t = ByTime::new(2);
        let since = t.now();
        for tries in 1..=3 {
            t.make(tries);
        }
        assert_eq!(
            (t.claim(since), t.claim(since), t.claim(since)),
            (Some(2), Some(3), None)
        );
    }

    /// One step of a copy's traffic: request `i` begins, its call fails (a token), or it
    /// answers with a failure.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Begin,
        CallFails,
        Answers,
    }

    proptest! {
        /// Every request of a pass-through app whose call failed (begin, its call's token, its
        /// failure, in that order, interleaved any way with the others') is marked: no failure
        /// takes a token another needed.
        #[test]
        fn every_passed_up_failure_is_marked(order in proptest::collection::vec(0usize..6, 0..60)) {
            let t = ByTime::new(64);
            let mut stage = [0u8; 6];
            let mut since = [0u64; 6];
            let steps = [Step::Begin, Step::CallFails, Step::Answers];
            for i in order {
                let Some(step) = steps.get(usize::from(stage[i])) else { continue };
                match step {
                    Step::Begin => since[i] = t.now(),
                    Step::CallFails => t.make(3),
                    Step::Answers => prop_assert_eq!(t.claim(since[i]), Some(3)),
                }
                stage[i] += 1;
            }
        }
    }
}
