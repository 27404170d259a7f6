//! `fault-injected`: a service whose file injects faults (`services.<name>.fault`). A fault is
//! for a test run; one left in the file a team deploys fails or slows real requests, so `check`
//! says so before it goes out, with what it does.

use hopwise_model::Mesh;
use hopwise_model::fault::{Answer, Fault};

use super::{Finding, Severity};

/// One warning per service with a fault.
pub(super) fn findings(mesh: &Mesh) -> Vec<Finding> {
    (mesh.services.iter())
        .filter_map(|(name, s)| s.fault.as_ref().map(|f| finding(name, f)))
        .collect()
}

fn finding(service: &str, f: &Fault) -> Finding {
    let mut what = Vec::new();
    if let Some(d) = f.delay {
        what.push(format!("{} % of its requests held {:?}", d.percent, d.time));
    }
    if let Some(a) = f.abort {
        let answer = match a.answer {
            Answer::Http(s) => format!("HTTP {s}"),
            Answer::Grpc(c) => c.name().to_owned(),
        };
        what.push(format!("{} % answered {answer} without its app", a.percent));
    }
    let only = match &f.header {
        Some((name, _)) => format!(", only requests carrying `{}`", name.as_str()),
        None => String::new(),
    };
    Finding {
        code: "fault-injected",
        severity: Severity::Warning,
        subject: service.to_owned(),
        path: format!("services.{service}.fault"),
        message: format!(
            "{service}'s proxies inject faults: {}{only}",
            if what.is_empty() {
                "none yet".to_owned()
            } else {
                what.join("; ")
            }
        ),
        fix: "remove `fault` before deploying, or limit it to requests carrying a header"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_in_the_file_is_a_warning_saying_what_it_does() {
        let mesh = Mesh::from_yaml(
            "services:\n  a:\n    fault: { delay: { time: 2s, percent: 10 }, abort: { status: 503, percent: 5 } }\n  b: {}\n",
        )
        .unwrap();
        let found = findings(&mesh);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(
            (f.code, f.path.as_str()),
            ("fault-injected", "services.a.fault")
        );
        assert_eq!(
            f.message,
            "a's proxies inject faults: 10 % of its requests held 2s; 5 % answered HTTP 503 without its app"
        );
    }
}
