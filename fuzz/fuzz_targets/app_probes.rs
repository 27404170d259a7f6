//! An injected pod's probes as its proxy reads them from `$HOPWISE_APP_PROBES`
//! (`hopwise_model::app_probe::AppProbes::parse`; injection writes the variable, the proxy's
//! admin port runs what it names). Never a panic, and what is accepted is what the proxy relies
//! on without checking again: at most 64 probes, each at `/app-health/<container>/<kind>`, a
//! port other than 0, a timeout of 1 to 300 s, an HTTP probe's path a request target `http`
//! builds a request of, its headers names and values `http` takes (the proxy treats a failure
//! there as a bug); and the probes write back to JSON that reads back the same.
#![no_main]

use hopwise_model::app_probe::{Action, AppProbes, MAX_PROBES, MAX_TIMEOUT_SECONDS, PREFIX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(probes) = AppProbes::parse(text) else {
        return;
    };
    assert!(probes.len() <= MAX_PROBES);
    for (path, probe) in probes.iter() {
        let rest = path.strip_prefix(PREFIX).expect("under the prefix");
        let (container, kind) = rest.split_once('/').expect("container and kind");
        assert!(!container.is_empty() && container.len() <= 63, "{path}");
        assert!(["startupz", "livez", "readyz"].contains(&kind), "{path}");
        assert!((1..=MAX_TIMEOUT_SECONDS).contains(&probe.timeout_seconds));
        let port = match &probe.action {
            Action::Http {
                port,
                path: target,
                headers,
                ..
            } => {
                http::Request::get(target.as_str())
                    .body(())
                    .unwrap_or_else(|e| panic!("{target:?}: {e}"));
                for h in headers {
                    http::HeaderName::from_bytes(h.name.as_bytes())
                        .unwrap_or_else(|e| panic!("{:?}: {e}", h.name));
                    http::HeaderValue::from_str(&h.value)
                        .unwrap_or_else(|e| panic!("{:?}: {e}", h.value));
                }
                port
            }
            Action::Tcp { port } | Action::Grpc { port, .. } => port,
        };
        assert_ne!(*port, 0);
    }
    let back = AppProbes::parse(&probes.to_json()).expect("its own JSON reads back");
    assert_eq!(back, probes);
});
