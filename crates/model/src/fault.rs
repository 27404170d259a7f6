//! Faults a service's inbound proxies inject (`services.<name>.fault`, docs/config.md): a delay
//! before a share of the requests go to the app, and an abort — an HTTP status or a gRPC code
//! answered at once, without the app — for a share, optionally only for requests carrying a
//! header. To see what a service's callers do when it is slow or failing, on the real path.
//!
//! Pure: the proxy hands in whether the header is there and two random draws; what to inject
//! comes out ([`Fault::decide`]), table-tested here without a socket.

use std::time::Duration;

use serde::Serialize;

use crate::diag::Diagnostic;
use crate::policy::{GrpcCode, Protocol};
use crate::raw::RawFault;
use crate::read::Locations;
use crate::route::{HeaderName, HeaderValue};

/// A service's faults, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    pub delay: Option<Delay>,
    pub abort: Option<Abort>,
    /// Only requests with this header (and, if given, this value exactly) are touched.
    #[serde(skip)]
    pub header: Option<(HeaderName, Option<HeaderValue>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Delay {
    pub time: Duration,
    /// 0–100.
    pub percent: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Abort {
    pub answer: Answer,
    /// 0–100.
    pub percent: u8,
}

/// What an abort answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Answer {
    Http(u16),
    Grpc(GrpcCode),
}

/// What one request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Injected {
    pub delay: Option<Duration>,
    pub abort: Option<Answer>,
}

impl Fault {
    /// What to inject into a request that carries the header (`marked`, when the fault names
    /// one), with two uniform draws: the delay's and the abort's, each taken modulo 100, so of
    /// draws `0..100` exactly `percent` are touched.
    pub fn decide(&self, marked: bool, delay_draw: u32, abort_draw: u32) -> Injected {
        if self.header.is_some() && !marked {
            return Injected::default();
        }
        let takes = |percent: u8, draw: u32| draw % 100 < u32::from(percent);
        Injected {
            delay: (self.delay)
                .filter(|d| takes(d.percent, delay_draw))
                .map(|d| d.time),
            abort: (self.abort)
                .filter(|a| takes(a.percent, abort_draw))
                .map(|a| a.answer),
        }
    }
}

/// The gRPC codes an abort may answer, by the words the file uses.
const GRPC_WORDS: [(&str, GrpcCode); 6] = [
    ("cancelled", GrpcCode::Cancelled),
    ("unknown", GrpcCode::Unknown),
    ("deadline-exceeded", GrpcCode::DeadlineExceeded),
    ("resource-exhausted", GrpcCode::ResourceExhausted),
    ("internal", GrpcCode::Internal),
    ("unavailable", GrpcCode::Unavailable),
];

/// `service`'s fault from its raw form, every problem reported at its path.
pub fn resolve(
    raw: Option<&RawFault>,
    service: &str,
    protocol: Protocol,
    locations: &Locations,
    diags: &mut Vec<Diagnostic>,
) -> Option<Fault> {
    let raw = raw?;
    let at = format!("services.{service}.fault");
    let mut problem = |path: String, message: String| {
        diags.push(Diagnostic::new(&path, locations.of(&path), message));
    };
    let abort = raw.abort.as_ref().and_then(|a| {
        let answer = match (a.status, &a.grpc, protocol) {
            (Some(s), None, Protocol::Http) if (200..=599).contains(&s) => Answer::Http(s as u16),
            (Some(s), None, Protocol::Http) => {
                problem(
                    format!("{at}.abort.status"),
                    format!("an HTTP status is 200 to 599, not {s}"),
                );
                return None;
            }
            (None, Some(word), Protocol::Grpc) => {
                match GRPC_WORDS.iter().find(|(w, _)| w == word) {
                    Some((_, code)) => Answer::Grpc(*code),
                    None => {
                        let words: Vec<&str> = GRPC_WORDS.iter().map(|(w, _)| *w).collect();
                        problem(
                            format!("{at}.abort.grpc"),
                            format!("`{word}` is not one of {}", words.join(", ")),
                        );
                        return None;
                    }
                }
            }
            (_, _, Protocol::Http) => {
                problem(
                    format!("{at}.abort"),
                    "an HTTP service's abort names its `status` (and no `grpc`)".into(),
                );
                return None;
            }
            (_, _, Protocol::Grpc) => {
                problem(
                    format!("{at}.abort"),
                    "a gRPC service's abort names its `grpc` status (and no HTTP `status`)".into(),
                );
                return None;
            }
        };
        Some(Abort {
            answer,
            percent: a.percent.unwrap_or(100),
        })
    });
    let header = raw.header.as_ref().and_then(|h| {
        let name = HeaderName::new(&h.name)
            .map_err(|e| problem(format!("{at}.header.name"), e))
            .ok()?;
        let value = match &h.value {
            Some(v) => Some(
                HeaderValue::new(v)
                    .map_err(|e| problem(format!("{at}.header.value"), e))
                    .ok()?,
            ),
            None => None,
        };
        Some((name, value))
    });
    Some(Fault {
        delay: raw.delay.as_ref().map(|d| Delay {
            time: d.time.0,
            percent: d.percent.unwrap_or(100),
        }),
        abort,
        header,
    })
}

#[cfg(test)]
mod tests;
