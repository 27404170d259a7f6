//! The seed's two calculators, as the dashboard offers them: thin wrappers that check the
//! form's input and run `hopwise-analyze` — the same code as `hopwise fanout` and
//! `hopwise check`. Pure.
//!
//! - Retry fan-out: [`hopwise_analyze::chain::run`], exactly `hopwise fanout`'s computation.
//! - Timeout budgets: the chain is written as a mesh file (the timeout-budget sample's shape:
//!   every layer retries connect failures and gateway errors, fixed back-off, no single-hop
//!   mark), read by `Mesh::from_yaml` and analysed by `hopwise_analyze::check`, so the answer
//!   is what `hopwise check` says of that file.

use std::time::Duration;

use hopwise_analyze::chain::{self, ChainFailure, Params};
use hopwise_analyze::{Finding, Options};
use hopwise_model::{Dur, Mesh, Protocol};
use serde::{Deserialize, Serialize};

/// Why a calculator refused its input (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalcError {
    #[error("{0}")]
    Input(String),
}

fn input(msg: impl Into<String>) -> CalcError {
    CalcError::Input(msg.into())
}

/// The fan-out calculator's form (`hopwise fanout`'s flags).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FanoutInput {
    pub depth: u32,
    pub proxy_retries: u32,
    pub code_retries: u32,
    /// `down`, `error` or `hang`.
    pub failure: String,
    /// `grpc` or `http`.
    pub protocol: String,
    pub retriable_status_codes: Vec<u16>,
    /// A retry budget on every proxy, as a share (0.2 = 20 %).
    pub budget: Option<f64>,
    pub top_only: bool,
}

impl Default for FanoutInput {
    /// The seed's sample "Istio gRPC, bottom down": 3 calls deep, 2 proxy retries, no code
    /// retries → 27.
    fn default() -> Self {
        FanoutInput {
            depth: 3,
            proxy_retries: 2,
            code_retries: 0,
            failure: "down".into(),
            protocol: "grpc".into(),
            retriable_status_codes: Vec::new(),
            budget: None,
            top_only: false,
        }
    }
}

impl FanoutInput {
    fn params(&self) -> Result<Params, CalcError> {
        if !(1..=8).contains(&self.depth) {
            return Err(input("depth: use 1 to 8 calls"));
        }
        if self.proxy_retries > 10 || self.code_retries > 10 {
            return Err(input("retries: use 0 to 10"));
        }
        if let Some(b) = self.budget
            && !(b.is_finite() && (0.0..=1.0).contains(&b))
        {
            return Err(input("budget: a share from 0 to 1 (0.2 = 20 %)"));
        }
        let failure = match self.failure.as_str() {
            "down" => ChainFailure::Down,
            "error" => ChainFailure::Error,
            "hang" => ChainFailure::Hang,
            other => return Err(input(format!("failure `{other}`: use down, error or hang"))),
        };
        let protocol = match self.protocol.as_str() {
            "grpc" => Protocol::Grpc,
            "http" => Protocol::Http,
            other => return Err(input(format!("protocol `{other}`: use grpc or http"))),
        };
        Ok(Params {
            depth: self.depth,
            proxy_retries: self.proxy_retries,
            code_retries: self.code_retries,
            failure,
            protocol,
            retriable_status_codes: self.retriable_status_codes.clone(),
            budget: self.budget,
            top_only: self.top_only,
        })
    }
}

/// The fan-out calculator's answer: `hopwise fanout`'s outcome, and its text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanoutAnswer {
    #[serde(flatten)]
    pub outcome: chain::Outcome,
    pub text: String,
}

pub fn fanout(form: &FanoutInput) -> Result<FanoutAnswer, CalcError> {
    let p = form.params()?;
    let outcome = chain::run(&p);
    let text = chain::text(&p, &outcome);
    Ok(FanoutAnswer { outcome, text })
}

/// One call of the timeout-budget chain.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutCall {
    /// `1s`, `500ms`, or `none`.
    pub per_try_timeout: String,
    /// The whole call's timeout: `none` in the seed.
    #[serde(default = "none")]
    pub timeout: String,
    pub retries: u32,
}

fn none() -> String {
    "none".into()
}

/// The timeout-budget calculator's form: services top first, one call fewer than services.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutInput {
    pub services: Vec<String>,
    pub calls: Vec<TimeoutCall>,
    /// How long the outside client waits for the top service (`2s`, or `none`).
    pub client_timeout: String,
    /// Fixed back-off between tries.
    pub backoff: String,
}

impl Default for TimeoutInput {
    /// The seed's timeout-budget sample (`examples/seed/timeout-budget.yaml`): 9.20 s.
    fn default() -> Self {
        let call = |per_try: &str| TimeoutCall {
            per_try_timeout: per_try.into(),
            timeout: none(),
            retries: 2,
        };
        TimeoutInput {
            services: ["frontend", "checkout", "pricing", "inventory"]
                .map(String::from)
                .to_vec(),
            calls: vec![call("none"), call("1s"), call("500ms")],
            client_timeout: "2s".into(),
            backoff: "25ms".into(),
        }
    }
}

/// A duration as the form gives it; checked so it cannot change the file's structure.
fn duration(field: &str, text: &str, allow_none: bool) -> Result<String, CalcError> {
    let t = text.trim();
    if allow_none && (t == "none" || t.is_empty()) {
        return Ok("none".into());
    }
    t.parse::<Dur>().map(|d| d.to_string()).map_err(|e| {
        input(format!(
            "{field}: `{t}` is not a duration ({e}); e.g. 500ms, 1s"
        ))
    })
}

fn service_name(text: &str) -> Result<String, CalcError> {
    let t = text.trim();
    let ok = !t.is_empty()
        && t.len() <= 40
        && t.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && t.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(t.to_owned())
    } else {
        Err(input(format!(
            "service name `{t}`: use lowercase letters, digits and `-`, starting with a letter"
        )))
    }
}

impl TimeoutInput {
    /// The chain as a mesh file.
    pub fn mesh_yaml(&self) -> Result<String, CalcError> {
        if self.services.len() < 2 || self.services.len() > 9 {
            return Err(input("use 2 to 9 services (1 to 8 calls)"));
        }
        if self.calls.len() + 1 != self.services.len() {
            return Err(input("give one call per pair of neighbouring services"));
        }
        let names = self
            .services
            .iter()
            .map(|s| service_name(s))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(input(format!("service `{n}` appears twice")));
            }
        }
        let client = duration("client timeout", &self.client_timeout, true)?;
        let backoff = duration("back-off", &self.backoff, false)?;
        let mut yaml = format!(
            "mesh:\n  name: timeout-calculator\ndefaults:\n  retries:\n    on: [connect-failure, gateway-error]\n    single_hop: false\n    backoff: {{ strategy: fixed, base: {backoff} }}\nservices:\n"
        );
        for (i, name) in names.iter().enumerate() {
            if i + 1 == names.len() {
                // The bottom: calls nothing.
                yaml.push_str(&format!("  {name}: {{}}\n"));
                break;
            }
            yaml.push_str(&format!("  {name}:\n"));
            if i == 0 {
                yaml.push_str(&format!("    entry: {{ timeout: {client} }}\n"));
            }
            match (self.calls.get(i), names.get(i + 1)) {
                (Some(call), Some(to)) => {
                    if call.retries > 10 {
                        return Err(input("retries: use 0 to 10"));
                    }
                    let per_try = duration("per-try timeout", &call.per_try_timeout, true)?;
                    let timeout = duration("timeout", &call.timeout, true)?;
                    yaml.push_str(&format!(
                        "    calls:\n      {to}: {{ timeout: {timeout}, per_try_timeout: {per_try}, retries: {{ count: {} }} }}\n",
                        call.retries
                    ));
                }
                _ => return Err(input("give one call per pair of neighbouring services")),
            }
        }
        Ok(yaml)
    }
}

/// One call's timeout budget, in milliseconds for the page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallBudget {
    pub call: String,
    pub per_try_timeout_ms: Option<u64>,
    pub tries: u32,
    pub tries_when_hung: u32,
    pub try_ends_with: String,
    /// `None`: never ends.
    pub worst_case_ms: Option<u64>,
    pub caller_window_ms: Option<u64>,
    pub tries_that_fit: u32,
    pub largest_fitting_per_try_ms: Option<u64>,
    pub callee_tries_that_fit: Option<(u32, u32)>,
}

/// The timeout-budget calculator's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeoutAnswer {
    /// The top service's worst case when the bottom hangs (`None`: never ends).
    pub worst_case_ms: Option<u64>,
    pub client_waits_ms: Option<u64>,
    pub calls: Vec<CallBudget>,
    pub findings: Vec<Finding>,
    /// The mesh file the answer is about (`hopwise check` gives the same on it).
    pub mesh_yaml: String,
}

fn ms(d: Option<Duration>) -> Option<u64> {
    d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn timeouts(form: &TimeoutInput) -> Result<TimeoutAnswer, CalcError> {
    let yaml = form.mesh_yaml()?;
    let mesh = Mesh::from_yaml(&yaml).map_err(|d| input(d.render("calculator")))?;
    let report = hopwise_analyze::check(&mesh, &Options::default());
    let entry = report.timeouts.entries.first();
    Ok(TimeoutAnswer {
        worst_case_ms: entry.and_then(|e| ms(e.worst_case)),
        client_waits_ms: entry.and_then(|e| ms(e.client_waits)),
        calls: report
            .timeouts
            .calls
            .iter()
            .map(|c| CallBudget {
                call: c.call.clone(),
                per_try_timeout_ms: ms(c.per_try_timeout),
                tries: c.tries,
                tries_when_hung: c.tries_when_hung,
                try_ends_with: c.try_ends_with.clone(),
                worst_case_ms: ms(c.worst_case),
                caller_window_ms: ms(c.caller_window),
                tries_that_fit: c.tries_that_fit,
                largest_fitting_per_try_ms: ms(c.largest_fitting_per_try),
                callee_tries_that_fit: c.callee_tries_that_fit,
            })
            .collect(),
        findings: report.findings,
        mesh_yaml: yaml,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_samples_give_27_and_9_20_s() {
        let f = fanout(&FanoutInput::default()).unwrap();
        assert_eq!(f.outcome.attempts, 27);
        assert!(f.text.starts_with("27 calls reach inventory"), "{}", f.text);
        let t = timeouts(&TimeoutInput::default()).unwrap();
        assert_eq!(t.worst_case_ms, Some(9200));
        assert_eq!(t.client_waits_ms, Some(2000));
        let worst: Vec<_> = t.calls.iter().map(|c| c.worst_case_ms).collect();
        assert_eq!(worst, [Some(9200), Some(3050), Some(1550)]);
        let fit: Vec<_> = t
            .calls
            .iter()
            .map(|c| c.largest_fitting_per_try_ms)
            .collect();
        assert_eq!(fit, [Some(650), None, Some(316)]);
        assert!(t.findings.iter().any(|f| f.code == "exceeds-client"));
    }

    #[test]
    fn the_timeout_sample_is_the_shipped_file_as_check_reads_it() {
        let shipped = Mesh::from_yaml(include_str!(
            "../../../../examples/seed/timeout-budget.yaml"
        ))
        .unwrap();
        let ours = Mesh::from_yaml(&TimeoutInput::default().mesh_yaml().unwrap()).unwrap();
        let a = hopwise_analyze::check(&shipped, &Options::default());
        let b = hopwise_analyze::check(&ours, &Options::default());
        assert_eq!(a.timeouts, b.timeouts);
    }

    #[test]
    fn bad_input_is_refused_with_a_reason_not_a_panic() {
        let mut f = FanoutInput {
            failure: "melted".into(),
            ..FanoutInput::default()
        };
        assert!(fanout(&f).unwrap_err().to_string().contains("melted"));
        f = FanoutInput {
            depth: 99,
            ..FanoutInput::default()
        };
        assert!(fanout(&f).is_err());
        f = FanoutInput {
            budget: Some(f64::NAN),
            ..FanoutInput::default()
        };
        assert!(fanout(&f).is_err());
        let mut t = TimeoutInput::default();
        t.calls[0].per_try_timeout = "1s }\nservices: {".into();
        assert!(
            timeouts(&t)
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
        t = TimeoutInput::default();
        t.services[1] = "Check: out".into();
        assert!(timeouts(&t).is_err());
        t = TimeoutInput::default();
        t.calls.pop();
        assert!(timeouts(&t).is_err());
        // Shorter and longer chains work.
        t = TimeoutInput::default();
        t.services.truncate(2);
        t.calls.truncate(1);
        t.calls[0].per_try_timeout = "300ms".into();
        let a = timeouts(&t).unwrap();
        assert_eq!(a.worst_case_ms, Some(3 * 300 + 2 * 25));
    }
}
