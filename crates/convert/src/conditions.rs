//! Retry conditions as each mesh writes them, in hopwise's (Envoy's) words: Istio's `retryOn`
//! (Envoy names, and status codes as numbers), Linkerd's `retry.linkerd.io/http` (codes, ranges,
//! `gateway-error`, `5xx`) and `retry.linkerd.io/grpc` (gRPC status names). A word we cannot
//! count is refused at its line: guessing would miscount.
//!
//! Linkerd's words name response codes only: its `5xx` is 500–599 and its `gateway-error`
//! 502–504, never a failed connection or a reset — unlike Envoy's conditions of the same names,
//! which also retry those. So they become status codes, not Envoy's names.

use hopwise_model::RetryOn;

/// Condition names and status codes read from a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    pub names: Vec<String>,
    pub codes: Vec<u16>,
}

impl Conditions {
    fn name(&mut self, name: &str) {
        if !self.names.iter().any(|n| n == name) {
            self.names.push(name.to_owned());
        }
    }

    fn code(&mut self, code: u16) {
        if !self.codes.contains(&code) {
            self.codes.push(code);
        }
    }

    /// Codes need `retriable-status-codes` to be retried, as Istio adds it.
    fn close(mut self) -> Conditions {
        if !self.codes.is_empty() {
            self.name("retriable-status-codes");
        }
        self
    }
}

fn known() -> String {
    RetryOn::ALL
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

fn status(word: &str) -> Result<u16, String> {
    match word.parse::<u16>() {
        Ok(c) if (100..=599).contains(&c) => Ok(c),
        _ => Err(format!("`{word}` is not an HTTP status (100–599)")),
    }
}

/// Istio's `retryOn`: Envoy's names, numbers as status codes.
pub fn istio(list: &str) -> Result<Conditions, String> {
    let mut out = Conditions::default();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if word.bytes().all(|b| b.is_ascii_digit()) {
            out.code(status(word)?);
        } else if RetryOn::ALL.iter().any(|(n, _)| *n == word) {
            out.name(word);
        } else {
            return Err(format!(
                "`{word}` is a retry condition hopwise cannot count; it counts {}",
                known()
            ));
        }
    }
    Ok(out.close())
}

/// Linkerd's `5xx`: every 5XX response code, and nothing else.
pub const LINKERD_5XX: std::ops::RangeInclusive<u16> = 500..=599;

/// Linkerd's `retry.linkerd.io/http`: `5xx`, `gateway-error`, `504`, `500-504`, each a set of
/// response codes.
pub fn linkerd_http(list: &str) -> Result<Conditions, String> {
    let mut out = Conditions::default();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word {
            "5xx" => LINKERD_5XX.for_each(|c| out.code(c)),
            "gateway-error" => (502..=504).for_each(|c| out.code(c)),
            _ => match word.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (status(a.trim())?, status(b.trim())?);
                    if a > b {
                        return Err(format!("`{word}`: the range runs backwards"));
                    }
                    (a..=b).for_each(|c| out.code(c));
                }
                None => out.code(status(word)?),
            },
        }
    }
    Ok(out.close())
}

/// Linkerd's `retry.linkerd.io/grpc`: gRPC status names.
pub fn linkerd_grpc(list: &str) -> Result<Conditions, String> {
    let mut out = Conditions::default();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word {
            "cancelled" | "deadline-exceeded" | "internal" | "resource-exhausted"
            | "unavailable" => out.name(word),
            _ => {
                return Err(format!(
                    "`{word}` is not one of Linkerd's gRPC retry conditions (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable)"
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_numbers_are_status_codes() {
        let c = istio("connect-failure, 503,refused-stream").unwrap();
        assert_eq!(
            c.names,
            [
                "connect-failure",
                "refused-stream",
                "retriable-status-codes"
            ]
        );
        assert_eq!(c.codes, [503]);
        assert!(
            istio("retriable-headers")
                .unwrap_err()
                .contains("cannot count")
        );
    }

    #[test]
    fn linkerd_ranges_expand() {
        let c = linkerd_http("500-502,gateway-error").unwrap();
        assert_eq!(c.codes, [500, 501, 502, 503, 504]);
        // Response codes only: no Envoy name that would also retry a failed connection.
        assert_eq!(c.names, ["retriable-status-codes"]);
        let all = linkerd_http("5xx").unwrap();
        assert_eq!(
            (all.codes.len(), all.codes[0], all.codes[99]),
            (100, 500, 599)
        );
        assert_eq!(all.names, ["retriable-status-codes"]);
        assert!(linkerd_http("504-500").is_err());
        assert!(linkerd_grpc("unavailable,nope").is_err());
    }
}
