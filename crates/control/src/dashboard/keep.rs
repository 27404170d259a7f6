//! Which trace the full store lets go: the oldest ordinary one. The traces a person on call
//! comes looking for are the ones that failed and the slow ones, minutes after they happened,
//! when a busy mesh has sent thousands of ordinary traces since; so the newest [`MAX_FAILED`]
//! failed traces and the [`MAX_SLOW`] slowest of the rest outlive every ordinary trace. Failed
//! past their share are ordinary (oldest first), so a storm of failures cannot fill the store
//! with the storm's first minute. Pure.

use super::traces::MAX_TRACES;

/// Failed traces kept ahead of the rest: half the store.
pub const MAX_FAILED: usize = MAX_TRACES / 2;
/// The slowest traces that did not fail, kept ahead of the rest: a quarter of the store.
pub const MAX_SLOW: usize = MAX_TRACES / 4;

/// What the policy reads of a held trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub failed: bool,
    /// From its earliest span's start to its latest span's end, as far as it has arrived.
    pub duration_ns: u64,
}

/// Why a trace is kept ahead of the ordinary ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Failed,
    Slow,
    Ordinary,
}

/// Each held trace's standing; `held` is oldest first.
pub fn standing(held: &[Held]) -> Vec<Kept> {
    let mut out = vec![Kept::Ordinary; held.len()];
    let failed = held.iter().enumerate().rev().filter(|(_, h)| h.failed);
    for (i, _) in failed.take(MAX_FAILED) {
        out[i] = Kept::Failed;
    }
    let mut rest: Vec<usize> = (0..held.len())
        .filter(|&i| out[i] == Kept::Ordinary && !held[i].failed)
        .collect();
    // Slowest first; of two alike, the newer.
    rest.sort_by_key(|&i| std::cmp::Reverse((held[i].duration_ns, i)));
    for &i in rest.iter().take(MAX_SLOW) {
        out[i] = Kept::Slow;
    }
    out
}

/// The index (in `held`, oldest first) of the trace to let go: the oldest ordinary one, or
/// the oldest of all when none is ordinary (a store smaller than its shares); `None` when
/// nothing is held.
pub fn victim(held: &[Held]) -> Option<usize> {
    if held.is_empty() {
        return None;
    }
    let kept = standing(held);
    Some(kept.iter().position(|k| *k == Kept::Ordinary).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ms: u64) -> Held {
        Held {
            failed: false,
            duration_ns: ms * 1_000_000,
        }
    }

    fn failed(ms: u64) -> Held {
        Held {
            failed: true,
            ..ok(ms)
        }
    }

    #[test]
    fn the_oldest_ordinary_trace_goes_first() {
        assert_eq!(victim(&[]), None);
        // Few traces: every success is among the slowest, so the oldest goes.
        assert_eq!(victim(&[ok(5), ok(1), ok(3)]), Some(0));
        // A full store of equal successes: the newest MAX_SLOW are kept, the oldest goes.
        let same = vec![ok(2); MAX_TRACES];
        assert_eq!(victim(&same), Some(0));
        assert_eq!(standing(&same)[MAX_TRACES - 1], Kept::Slow);
    }

    #[test]
    fn a_slow_trace_outlives_faster_ones_after_it() {
        let mut held = vec![ok(900)];
        held.extend(std::iter::repeat_n(ok(2), MAX_TRACES - 1));
        // Kept: the slow one and the newest of the fast ones; the oldest fast one goes.
        assert_eq!(victim(&held), Some(1));
        assert_eq!(standing(&held)[0], Kept::Slow);
    }

    #[test]
    fn failures_are_kept_up_to_their_share_then_go_oldest_first() {
        let mut held = vec![failed(1)];
        held.extend(std::iter::repeat_n(ok(2), MAX_TRACES - 1));
        assert_eq!(standing(&held)[0], Kept::Failed);
        assert_ne!(victim(&held), Some(0));
        // All failed: the newest MAX_FAILED are kept, the oldest failure goes.
        let storm = vec![failed(1); MAX_TRACES];
        assert_eq!(victim(&storm), Some(0));
        let kept = standing(&storm);
        assert_eq!(
            kept.iter().filter(|k| **k == Kept::Failed).count(),
            MAX_FAILED
        );
        assert_eq!(kept[MAX_TRACES - 1], Kept::Failed);
    }

    #[test]
    fn a_failure_past_its_share_is_ordinary_however_slow() {
        // The oldest failure is past the failed share and slower than every success: the
        // share of slow ones belongs to the successes, so it is ordinary and goes first.
        let mut held = vec![failed(5_000)];
        held.extend(std::iter::repeat_n(failed(1), MAX_FAILED));
        held.extend(std::iter::repeat_n(ok(2), MAX_TRACES - MAX_FAILED - 1));
        assert_eq!(standing(&held)[0], Kept::Ordinary);
        assert_eq!(victim(&held), Some(0));
    }
}
