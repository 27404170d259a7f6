//! The Prometheus/OpenMetrics text a proxy's admin endpoint serves (`/metrics`), read into
//! samples. Pure. Only what the dashboard needs: `name{label="value",…} value`; comments,
//! `# EOF`, timestamps and exemplars are skipped, and a line that does not read is ignored
//! (one odd line must not blank a whole proxy).

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text`, in order.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(line).collect()
}

fn line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = label_set(after)?;
        labels = parsed;
        rest = tail;
    }
    // The value, then an optional timestamp and an optional exemplar (`# {…} …`).
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` → the pairs and what follows the `}`.
fn label_set(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_owned();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_histograms_and_escapes() {
        let text = r#"# HELP hopwise_requests Requests received, by route.
# TYPE hopwise_requests counter
hopwise_requests_total{direction="outbound",service="b",route="b"} 42
hopwise_request_duration_seconds_bucket{direction="outbound",service="b",route="b",le="+Inf"} 42
hopwise_odd{path="a \"quoted\" \\ value\n"} 1.5 1700000000
garbage line without a value
hopwise_bare 7
# EOF
"#;
        let s = parse(text);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "hopwise_requests_total");
        assert_eq!(s[0].label("service"), Some("b"));
        assert_eq!(s[0].value, 42.0);
        assert_eq!(s[1].label("le"), Some("+Inf"));
        assert_eq!(s[2].label("path"), Some("a \"quoted\" \\ value\n"));
        assert_eq!(s[2].value, 1.5);
        assert_eq!(s[3].labels, []);
        assert_eq!(s[3].value, 7.0);
    }

    #[test]
    fn never_panics_on_broken_lines() {
        for text in [
            "x{",
            "x{a",
            "x{a=",
            "x{a=\"",
            "x{a=\"b",
            "x{a=\"b\"",
            "x{a=\"b\"}",
            "{}",
            "x{} nan",
            "x{a=\"\\",
            "é{ü=\"ö\"} 1",
        ] {
            let _ = parse(text);
        }
        assert_eq!(parse("x{} 3")[0].value, 3.0);
    }
}
