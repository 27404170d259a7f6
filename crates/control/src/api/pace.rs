//! How often one service's streams are woken: at once for a change after a quiet spell (a lone
//! change costs no wait), and during a burst — a rolling restart's health flips, one a
//! millisecond — at most once per [`WINDOW`], the last wake coming at the window's end with
//! whatever state is in force then. So 1,000 flips in a second cost each subscriber about 20
//! snapshots, not 1,000, and every subscriber still ends on the final state: a change is never
//! dropped, only joined to the next wake (istiod debounces its pushes likewise). Pure: the
//! caller passes `now` and keeps the timer ([`Pace::change`] says when it must fire, once per
//! window; [`Pace::fire`] is its firing).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

/// The least time between two wakes of one service's streams.
pub const WINDOW: Duration = Duration::from_millis(50);

/// What the caller does with a change of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Wake its streams now.
    Wake,
    /// Wake them at this moment (start a timer that calls [`Pace::fire`]).
    At(Instant),
    /// A wake is already due: the change goes with it.
    Joined,
}

/// Per service, when its streams were last woken and whether a wake is due.
#[derive(Debug, Default)]
pub struct Pace {
    last: BTreeMap<String, Instant>,
    due: BTreeSet<String>,
}

impl Pace {
    /// `service`'s snapshots may have changed at `now`.
    pub fn change(&mut self, service: &str, now: Instant) -> Step {
        if self.due.contains(service) {
            return Step::Joined;
        }
        match self.last.get(service) {
            Some(last) if now < *last + WINDOW => {
                self.due.insert(service.to_owned());
                Step::At(*last + WINDOW)
            }
            _ => {
                self.last.insert(service.to_owned(), now);
                Step::Wake
            }
        }
    }

    /// The timer `change` asked for fired at `now`: wake `service`'s streams.
    pub fn fire(&mut self, service: &str, now: Instant) {
        self.due.remove(service);
        self.last.insert(service.to_owned(), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_wakes_once_at_first_then_once_per_window_and_last_after_the_final_change() {
        let mut pace = Pace::default();
        let t0 = Instant::now();
        assert_eq!(pace.change("a", t0), Step::Wake, "a lone change: at once");
        // 1,000 changes, one a millisecond, from 1 ms on; a timer fires as asked.
        let mut wakes = 1;
        let mut timer: Option<Instant> = None;
        let mut last_wake = t0;
        for ms in 1..=1000u64 {
            let now = t0 + Duration::from_millis(ms);
            if let Some(at) = timer.filter(|at| *at <= now) {
                pace.fire("a", at);
                wakes += 1;
                last_wake = at;
                timer = None;
            }
            match pace.change("a", now) {
                Step::Wake => {
                    wakes += 1;
                    last_wake = now;
                }
                Step::At(at) => {
                    assert!(timer.is_none(), "one timer at a time");
                    assert!(at > now && at <= now + WINDOW);
                    timer = Some(at);
                }
                Step::Joined => assert!(timer.is_some()),
            }
        }
        // The final change is carried by the timer still due.
        let at = timer.unwrap();
        assert!(at > last_wake && at <= t0 + Duration::from_millis(1000) + WINDOW);
        pace.fire("a", at);
        wakes += 1;
        assert!(
            (20..=22).contains(&wakes),
            "{wakes} wakes for 1,000 changes"
        );
        // Another service is paced apart; after a quiet window, at once again.
        assert_eq!(pace.change("b", at), Step::Wake);
        assert_eq!(pace.change("a", at + WINDOW), Step::Wake);
    }
}
