//! One access-log line, as JSON or in the common log format with hopwise's fields after it.
//! Pure: the time comes in as Unix nanoseconds, and nothing here reads a clock.

use std::fmt::Write;

use hopwise_model::raw::LogFormat;

/// What one line says about one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    /// Unix nanoseconds when the request arrived.
    pub time: u64,
    pub direction: &'static str,
    /// The proxy's service, and outbound the upstream called.
    pub service: String,
    pub upstream: Option<String>,
    pub route: Option<String>,
    /// Inbound: the caller's verified identity.
    pub caller: Option<String>,
    pub method: String,
    pub authority: Option<String>,
    /// The path, and the query as logged (`?…` unless `access_log.query`).
    pub path: String,
    pub status: u16,
    pub grpc_status: Option<u32>,
    pub tries: u32,
    /// The retry condition that started each retry, in order.
    pub retries: Vec<&'static str>,
    /// Why a retry a condition allowed was not made (`budget`, `deadline`, …).
    pub retry_skipped: Option<&'static str>,
    /// The copy the last try went to.
    pub copy: Option<String>,
    /// A reply the proxy made itself: its `x-hopwise-error` reason.
    pub local_reply: Option<String>,
    /// Body bytes as their `content-length` says (`None`: streamed, not counted).
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub duration_us: u64,
    /// The proxy's own time: the whole, less the time spent waiting for upstream or the app.
    pub proxy_us: u64,
    pub trace_id: Option<String>,
}

impl Line {
    /// The line, ending in `\n`.
    pub fn render(&self, format: LogFormat) -> String {
        match format {
            LogFormat::Json => self.json(),
            LogFormat::Common => self.common(),
        }
    }

    fn json(&self) -> String {
        let opt = |v: &Option<String>| v.as_deref().map_or(serde_json::Value::Null, Into::into);
        let value = serde_json::json!({
            "time": rfc3339(self.time),
            "direction": self.direction,
            "service": self.service,
            "upstream": opt(&self.upstream),
            "route": opt(&self.route),
            "caller": opt(&self.caller),
            "method": self.method,
            "authority": opt(&self.authority),
            "path": self.path,
            "status": self.status,
            "grpc_status": self.grpc_status,
            "tries": self.tries,
            "retries": self.retries,
            "retry_skipped": self.retry_skipped,
            "copy": opt(&self.copy),
            "local_reply": opt(&self.local_reply),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "duration_us": self.duration_us,
            "proxy_us": self.proxy_us,
            "trace_id": opt(&self.trace_id),
        });
        let mut out = value.to_string();
        out.push('\n');
        out
    }

    /// `host ident user [time] "request" status bytes`, then `key=value` pairs; `-` for none.
    fn common(&self) -> String {
        let dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
        let num = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let mut out = format!(
            "- - {} [{}] \"{} {}\" {} {}",
            dash(self.caller.as_deref()),
            clf_time(self.time),
            self.method,
            self.path,
            self.status,
            num(self.bytes_out),
        );
        let retries = if self.retries.is_empty() {
            "-".to_owned()
        } else {
            self.retries.join(",")
        };
        let pairs = [
            ("direction", self.direction.to_owned()),
            ("service", self.service.clone()),
            ("upstream", dash(self.upstream.as_deref())),
            ("route", dash(self.route.as_deref())),
            ("authority", dash(self.authority.as_deref())),
            ("grpc_status", num(self.grpc_status.map(u64::from))),
            ("tries", self.tries.to_string()),
            ("retries", retries),
            ("retry_skipped", dash(self.retry_skipped)),
            ("copy", dash(self.copy.as_deref())),
            ("local_reply", dash(self.local_reply.as_deref())),
            ("bytes_in", num(self.bytes_in)),
            ("duration_us", self.duration_us.to_string()),
            ("proxy_us", self.proxy_us.to_string()),
            ("trace_id", dash(self.trace_id.as_deref())),
        ];
        for (k, v) in pairs {
            let _ = write!(out, " {k}={v}");
        }
        out.push('\n');
        out
    }
}

/// Unix nanoseconds → (year, month, day, hours, minutes, seconds, microseconds), UTC.
fn civil(nanos: u64) -> (i64, u32, u32, u64, u64, u64, u64) {
    let secs = nanos / 1_000_000_000;
    let micros = (nanos % 1_000_000_000) / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        micros,
    )
}

/// `2026-12-01T16:07:06.123456Z`.
pub fn rfc3339(nanos: u64) -> String {
    let (y, mo, d, h, mi, s, us) = civil(nanos);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
}

/// `01/Dec/2026:16:07:06 +0000`.
fn clf_time(nanos: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s, _) = civil(nanos);
    let month = MONTHS[(mo as usize).clamp(1, 12) - 1];
    format!("{d:02}/{month}/{y:04}:{h:02}:{mi:02}:{s:02} +0000")
}

/// The path as logged: the query replaced by `?…` unless it is asked for.
pub fn logged_path(path_and_query: &str, query: bool) -> String {
    match path_and_query.split_once('?') {
        Some((path, _)) if !query => format!("{path}?…"),
        _ => path_and_query.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> Line {
        Line {
            // 2026-12-01T16:07:06.5Z
            time: 1_796_141_226_500_000_000,
            direction: "outbound",
            service: "a".into(),
            upstream: Some("b".into()),
            route: Some("quote".into()),
            method: "GET".into(),
            authority: Some("b".into()),
            path: "/quote/1?…".into(),
            status: 200,
            tries: 2,
            retries: vec!["5xx"],
            copy: Some("127.0.0.1:7001".into()),
            bytes_out: Some(12),
            duration_us: 1500,
            proxy_us: 40,
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            ..Default::default()
        }
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(1_796_141_226_500_000_000),
            "2026-12-01T16:07:06.500000Z"
        );
        // A leap day.
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(clf_time(0), "01/Jan/1970:00:00:00 +0000");
    }

    #[test]
    fn json_lines_hold_every_field() {
        let text = line().render(LogFormat::Json);
        assert!(text.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["time"], "2026-12-01T16:07:06.500000Z");
        assert_eq!(v["retries"], serde_json::json!(["5xx"]));
        assert_eq!(v["caller"], serde_json::Value::Null);
        assert_eq!(v["bytes_in"], serde_json::Value::Null);
        assert_eq!(v["proxy_us"], 40);
        assert_eq!(v.as_object().unwrap().len(), 21);
    }

    #[test]
    fn the_common_form_starts_as_the_common_log_format() {
        let text = line().render(LogFormat::Common);
        assert!(
            text.starts_with("- - - [01/Dec/2026:16:07:06 +0000] \"GET /quote/1?…\" 200 12 direction=outbound service=a upstream=b route=quote"),
            "{text}"
        );
        assert!(
            text.contains(" tries=2 retries=5xx retry_skipped=- copy=127.0.0.1:7001 "),
            "{text}"
        );
        assert!(
            text.trim_end()
                .ends_with("trace_id=4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn the_query_is_redacted_unless_asked_for() {
        assert_eq!(logged_path("/a?token=x", false), "/a?…");
        assert_eq!(logged_path("/a?token=x", true), "/a?token=x");
        assert_eq!(logged_path("/a", false), "/a");
    }
}
