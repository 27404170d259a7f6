//! `services.<name>.fault` on the inbound side: what a request gets is decided from plain data
//! ([`hopwise_model::fault::Fault::decide`]: whether it carries the header, two random draws);
//! here it is done. A delay is held with the request's place under the caps taken, so delayed
//! requests count against `inbound.max_requests` like a slow app's and cannot pile up without
//! bound; an abort is answered as this proxy's own reply (`x-hopwise-error: fault`) with the
//! status or gRPC code the file names. Both counted in `hopwise_faults_injected_total`.

use hopwise_model::fault::Injected;
use http::HeaderMap;

use super::Inbound;

impl Inbound {
    /// What the service's fault injects into a request with these headers (nothing without one).
    pub(super) fn injected(&self, headers: &HeaderMap) -> Injected {
        let Some(fault) = &self.config.fault else {
            return Injected::default();
        };
        let marked = fault.header.as_ref().is_some_and(|(name, value)| {
            headers.get_all(name.as_str()).iter().any(|v| {
                value
                    .as_ref()
                    .is_none_or(|want| v.as_bytes() == want.as_str().as_bytes())
            })
        });
        let injected = fault.decide(marked, fastrand::u32(..), fastrand::u32(..));
        let faults = &self.metrics.faults;
        if injected.delay.is_some() {
            faults.injected(&self.config.service, "delay");
        }
        if injected.abort.is_some() {
            faults.injected(&self.config.service, "abort");
        }
        injected
    }
}
