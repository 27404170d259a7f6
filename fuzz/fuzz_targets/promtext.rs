//! The dashboard's reader of a proxy's `/metrics` (`hopwise_control::dashboard::promtext::parse`)
//! on any text a proxy (or whatever answers at its admin address) may serve. Never a panic, and:
//! - the reader is line by line: the samples of the text are those of its lines in order, so
//!   one odd line costs only itself, and there are at most as many samples as lines;
//! - what it reads comes from the text: each name, label name and label value (escapes read)
//!   is no longer than the text;
//! - a sample whose name and label names are Prometheus' (`[a-zA-Z_:][a-zA-Z0-9_:]*`,
//!   `[a-zA-Z_][a-zA-Z0-9_]*`) printed back in the exposition format (values escaped, `+Inf`,
//!   `-Inf`, `NaN`, a timestamp after it) reads back as the same sample.
#![no_main]

use std::fmt::Write;

use hopwise_control::dashboard::promtext::{Sample, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let samples = parse(text);
    let by_line: Vec<Sample> = text.lines().flat_map(parse).collect();
    assert!(
        same(&samples, &by_line),
        "the text reads otherwise than its lines"
    );
    assert!(samples.len() <= text.lines().count());
    for s in &samples {
        assert!(s.name.len() <= text.len());
        for (k, v) in &s.labels {
            assert!(k.len() <= text.len() && v.len() <= text.len());
        }
        if !metric_name(&s.name) || !s.labels.iter().all(|(k, _)| label_name(k)) {
            continue;
        }
        let printed = print(s);
        let back = parse(&printed);
        assert!(
            same(&back, std::slice::from_ref(s)),
            "{s:?} printed as {printed:?} read {back:?}"
        );
    }
});

fn print(s: &Sample) -> String {
    let mut out = s.name.clone();
    if !s.labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in s.labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            write!(out, "{k}=\"{v}\"").unwrap();
        }
        out.push('}');
    }
    let value = match s.value {
        v if v == f64::INFINITY => "+Inf".to_owned(),
        v if v == f64::NEG_INFINITY => "-Inf".to_owned(),
        v if v.is_nan() => "NaN".to_owned(),
        v => format!("{v:?}"),
    };
    write!(out, " {value} 1700000000000\n").unwrap();
    out
}

/// Equal samples, a NaN equal to a NaN.
fn same(a: &[Sample], b: &[Sample]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.labels == y.labels
                && (x.value.to_bits() == y.value.to_bits()
                    || (x.value.is_nan() && y.value.is_nan()))
        })
}

fn metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
