//! What each app carries as its proxies saw it, beside what the mesh file declares (issue 31):
//! the calls an app made while serving requests, by whether they carried trace context on
//! (`hopwise_app_calls_total`), and its failures its proxies marked, by link
//! (`hopwise_app_failures_marked_total`). A declaration the traffic contradicts skews `hopwise
//! check` silently, so the dashboard says so. Pure: counts in, a verdict out.

use hopwise_api::names::metric;
use hopwise_model::Carries;
use serde::Serialize;

use super::promtext::Sample;

/// One copy's (or one service's summed) counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Seen {
    /// Calls made while serving requests that carried trace context on, and that did not.
    pub carried: f64,
    pub absent: f64,
    /// Failed answers marked "retries exhausted", linked by trace and by time.
    pub marked_by_trace: f64,
    pub marked_by_time: f64,
}

/// Calls seen before the dashboard judges a declaration.
pub const ENOUGH: f64 = 20.0;

impl Seen {
    /// Reads one sample of the copy's own service (its app's), if it is one of these.
    pub fn read(&mut self, s: &Sample) {
        let slot = match (s.name.as_str(), s.label("trace_context"), s.label("link")) {
            (metric::APP_CALLS, Some("carried"), _) => &mut self.carried,
            (metric::APP_CALLS, Some("absent"), _) => &mut self.absent,
            (metric::APP_FAILURES_MARKED, _, Some("trace")) => &mut self.marked_by_trace,
            (metric::APP_FAILURES_MARKED, _, Some("time")) => &mut self.marked_by_time,
            _ => return,
        };
        *slot += s.value;
    }

    pub fn add(&mut self, o: &Seen) {
        self.carried += o.carried;
        self.absent += o.absent;
        self.marked_by_trace += o.marked_by_trace;
        self.marked_by_time += o.marked_by_time;
    }

    /// What the traffic says of `declared`, when it contradicts it (`None`: it agrees, or too
    /// few calls were seen, or the copies are relays, which carry everything).
    pub fn disagrees(&self, declared: Carries) -> Option<String> {
        let calls = self.carried + self.absent;
        if declared.relay || calls < ENOUGH {
            return None;
        }
        let share = self.carried / calls;
        let (carried, calls) = (self.carried.round() as u64, calls.round() as u64);
        if declared.trace_context && share < 0.05 {
            Some(format!(
                "declares trace-context, but {carried} of {calls} calls its app made while serving \
                 requests carried it: check counts deadlines and ended calls through it that do \
                 not happen (the retries-exhausted mark still passes, by time)"
            ))
        } else if !declared.trace_context && share > 0.95 {
            Some(format!(
                "carries trace context on ({carried} of {calls} calls) but does not declare it: \
                 add `carries: [trace-context]`, or check counts deadlines stopping at it"
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(carried: f64, absent: f64) -> Seen {
        Seen {
            carried,
            absent,
            ..Seen::default()
        }
    }

    #[test]
    fn a_declaration_the_traffic_contradicts_is_named() {
        let tc = Carries {
            trace_context: true,
            ..Carries::default()
        };
        let nothing = Carries::default();
        assert!(seen(0.0, 40.0).disagrees(tc).unwrap().contains("0 of 40"));
        assert!(
            seen(40.0, 0.0)
                .disagrees(nothing)
                .unwrap()
                .contains("40 of 40")
        );
        assert_eq!(seen(40.0, 0.0).disagrees(tc), None);
        assert_eq!(seen(0.0, 40.0).disagrees(nothing), None);
        // Too few calls, a mixed app, a relay: no verdict.
        assert_eq!(seen(0.0, 19.0).disagrees(tc), None);
        assert_eq!(seen(20.0, 20.0).disagrees(tc), None);
        let relay = Carries {
            relay: true,
            ..Carries::default()
        };
        assert_eq!(seen(40.0, 0.0).disagrees(relay), None);
    }

    #[test]
    fn only_the_apps_series_are_read() {
        let text = "hopwise_app_calls_total{service=\"a\",trace_context=\"carried\"} 3\n\
                    hopwise_app_calls_total{service=\"a\",trace_context=\"absent\"} 5\n\
                    hopwise_app_failures_marked_total{service=\"a\",link=\"time\"} 2\n\
                    hopwise_requests_total{direction=\"inbound\",service=\"a\",route=\"r\"} 9\n";
        let mut s = Seen::default();
        for sample in super::super::promtext::parse(text) {
            s.read(&sample);
        }
        assert_eq!(
            s,
            Seen {
                carried: 3.0,
                absent: 5.0,
                marked_by_trace: 0.0,
                marked_by_time: 2.0
            }
        );
    }
}
