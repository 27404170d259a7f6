//! Durations as a mesh file writes them (`300ms`, `1.8s`, `2m`) and as reports print them.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

/// A duration written with a unit: `ns`, `us`, `ms`, `s`, `m` or `h`; decimals allowed (`1.8s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub const fn from_millis(ms: u64) -> Self {
        Dur(Duration::from_millis(ms))
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

/// Why a duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurError {
    #[error("`{0}` has no unit; write it as e.g. `300ms`, `1.5s` or `2m`")]
    NoUnit(String),
    #[error("`{0}` has an unknown unit; use ns, us, ms, s, m or h")]
    BadUnit(String),
    #[error("`{0}` is not a number followed by a unit")]
    BadNumber(String),
    #[error("`{0}` is negative; a duration cannot be")]
    Negative(String),
    #[error("`{0}` is too long")]
    TooLong(String),
    #[error(
        "`{0}` is not a Gateway API duration: one to four parts, each 1–5 digits and `h`, `m`, `s` or `ms` (`500ms`, `1h30m`; no decimals)"
    )]
    NotGateway(String),
}

impl std::str::FromStr for Dur {
    type Err = DurError;

    fn from_str(text: &str) -> Result<Self, DurError> {
        let s = text.trim();
        if s.starts_with('-') {
            return Err(DurError::Negative(text.to_owned()));
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| DurError::NoUnit(text.to_owned()))?;
        let (number, unit) = s.split_at(split);
        let nanos_per_unit: u128 = match unit.trim() {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(DurError::BadUnit(text.to_owned())),
        };
        // Exact decimal arithmetic: `4194309.213s` must not come back a few ns off.
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') || whole.len() > 20 {
            return Err(DurError::BadNumber(text.to_owned()));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| DurError::BadNumber(text.to_owned()))?
        };
        let mut nanos = whole * nanos_per_unit;
        let mut scale = nanos_per_unit;
        for digit in frac.bytes().take(30) {
            scale /= 10;
            nanos += u128::from(digit - b'0') * scale;
        }
        // A year is far beyond any timeout that means something.
        if nanos > 365 * 24 * 3_600_000_000_000 {
            return Err(DurError::TooLong(text.to_owned()));
        }
        Ok(Dur(Duration::from_nanos(nanos as u64)))
    }
}

impl Dur {
    /// A duration in the Gateway API's format (GEP-2257, what HTTPRoute's `timeouts` and
    /// `retry.backoff` take): `^([0-9]{1,5}(h|m|s|ms)){1,4}$`, so `1h30m` and `500ms` but not
    /// `1.5s` or `300us` — a value another implementation reads the same way.
    pub fn gateway(text: &str) -> Result<Dur, DurError> {
        let bad = || DurError::NotGateway(text.to_owned());
        let mut rest = text;
        let mut millis: u64 = 0;
        let mut parts = 0;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            if digits == 0 || digits > 5 || parts == 4 {
                return Err(bad());
            }
            let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let (unit, len) = if rest.starts_with("ms") {
                (1, 2)
            } else if rest.starts_with('h') {
                (3_600_000, 1)
            } else if rest.starts_with('m') {
                (60_000, 1)
            } else if rest.starts_with('s') {
                (1_000, 1)
            } else {
                return Err(bad());
            };
            rest = &rest[len..];
            // Four parts of at most 99,999 hours each stay far inside a u64 of milliseconds.
            millis += number * unit;
            parts += 1;
        }
        if parts == 0 {
            return Err(bad());
        }
        if millis > 365 * 24 * 3_600_000 {
            return Err(DurError::TooLong(text.to_owned()));
        }
        Ok(Dur::from_millis(millis))
    }
}

/// A [`Dur`] the mesh file writes in the Gateway API's format ([`Dur::gateway`]): the route
/// rules' `timeouts` and `retry.backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(transparent)]
pub struct GatewayDur(pub Dur);

impl JsonSchema for GatewayDur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GatewayDuration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$",
            "description": "A Gateway API duration (GEP-2257): `500ms`, `2s`, `1h30m`; `0s` switches a timeout off.",
        })
    }
}

impl fmt::Display for Dur {
    /// Compact and exact where it can be: `25ms`, `1.8s`, `2m`, `316.666ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.as_nanos();
        let (unit, size): (&str, u128) = if n == 0 {
            return f.write_str("0s");
        } else if n.is_multiple_of(3_600_000_000_000) {
            ("h", 3_600_000_000_000)
        } else if n.is_multiple_of(60_000_000_000) {
            ("m", 60_000_000_000)
        } else if n >= 1_000_000_000 {
            ("s", 1_000_000_000)
        } else if n >= 1_000_000 {
            ("ms", 1_000_000)
        } else if n >= 1_000 {
            ("us", 1_000)
        } else {
            ("ns", 1)
        };
        let whole = n / size;
        let frac = n % size;
        if frac == 0 {
            return write!(f, "{whole}{unit}");
        }
        let digits = size.ilog10() as usize;
        let frac = format!("{frac:0digits$}");
        let frac = frac.trim_end_matches('0');
        let frac = &frac[..frac.len().min(3)];
        write!(f, "{whole}.{frac}{unit}")
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|ms|s|m|h)\s*$",
            "description": "A duration with a unit: `300ms`, `1.8s`, `2m`.",
        })
    }
}

/// Seconds with two decimals, as the seed prints worst cases (`9.20 s`); rounds half up.
pub fn seconds(d: Duration) -> String {
    let centis = (d.as_nanos() + 5_000_000) / 10_000_000;
    format!("{}.{:02} s", centis / 100, centis % 100)
}

/// Milliseconds when under a second (`650 ms`), else seconds (`1.55 s`), as the seed writes them.
pub fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        seconds(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Result<Duration, DurError> {
        s.parse::<Dur>().map(Dur::get)
    }

    #[test]
    fn reads_the_forms_the_issue_names() {
        assert_eq!(d("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(d("1.8s"), Ok(Duration::from_millis(1800)));
        assert_eq!(d("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(d("500us"), Ok(Duration::from_micros(500)));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(matches!(d("300"), Err(DurError::NoUnit(_))));
        assert!(matches!(d("-1s"), Err(DurError::Negative(_))));
        assert!(matches!(d("3 days"), Err(DurError::BadUnit(_))));
        assert!(matches!(d("1.2.3s"), Err(DurError::BadNumber(_))));
        assert!(matches!(d("ms"), Err(DurError::BadNumber(_))));
        assert!(matches!(d("9999999h"), Err(DurError::TooLong(_))));
    }

    #[test]
    fn reads_the_gateway_apis_format_and_nothing_wider() {
        let g = |s: &str| Dur::gateway(s).map(Dur::get);
        assert_eq!(g("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(g("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(g("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(g("1s500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(g("0s"), Ok(Duration::ZERO));
        for bad in [
            "",
            "1.5s",
            "300us",
            "300",
            "ms",
            "123456s",
            "1h1m1s1ms1h",
            " 1s",
            "1s ",
            "-1s",
            "1d",
        ] {
            assert!(
                matches!(Dur::gateway(bad), Err(DurError::NotGateway(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(Dur::gateway("99999h"), Err(DurError::TooLong(_))));
    }

    #[test]
    fn prints_compactly_and_round_trips() {
        for s in ["25ms", "1.8s", "2m", "1h", "500us", "316.666ms", "0s"] {
            let v: Dur = s.parse().unwrap();
            assert_eq!(v.to_string(), s);
        }
    }

    #[test]
    fn seconds_round_half_up_like_the_seed() {
        assert_eq!(seconds(Duration::from_millis(9200)), "9.20 s");
        assert_eq!(seconds(Duration::from_millis(1475)), "1.48 s");
        assert_eq!(human(Duration::from_millis(650)), "650 ms");
    }
}
