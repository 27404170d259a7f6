//! Sidecar injection, decided without I/O: given a Pod as an admission review carries it,
//! whether to inject it ([`decide`]) and the JSON patch that does (`patch.rs`), built from the
//! containers and volumes of `sidecar.rs`; `review.rs` reads an `AdmissionReview` and writes its
//! answer. What a pod opts in by is the API server's to check — the namespace label or the pod
//! label, in the `MutatingWebhookConfiguration`'s selectors (`registration.rs`) — so a pod that
//! reaches [`decide`] has opted in; what is left here is what selectors cannot say: the opt-out
//! annotation, a pod injected already (idempotence), a pod whose injection would be unsafe
//! (host network, an app running as the proxy's uid). The app's kubelet probes are moved to the
//! proxy's admin port (`probes.rs`), which runs them. Nothing here reads a socket or a clock.

mod labels;
mod patch;
mod probes;
mod review;
mod sidecar;

use k8s_openapi::api::core::v1::Pod;

pub use crate::review::BadReview;
pub use review::answer;
pub use sidecar::{CACHE_DIR, CONTROL_CA_ENV, DOWNWARD_ENV, TOKEN_DIR, TOKEN_FILE};

/// The label (on a namespace or a pod) that opts in with `enabled`, and out with `disabled`;
/// on a pod, an annotation of the same name set to `disabled` opts out too.
pub const INJECT: &str = "hopwise.dev/inject";
pub const ENABLED: &str = "enabled";
pub const DISABLED: &str = "disabled";
/// Set on every pod injected, to the version that injected it: the mark that makes injection
/// idempotent.
pub const INJECTED: &str = "hopwise.dev/injected";
/// The names injection adds; a pod that has any of them already is left alone.
pub const PROXY_CONTAINER: &str = "hopwise-proxy";
pub const INIT_CONTAINER: &str = "hopwise-init";
pub const TOKEN_VOLUME: &str = "hopwise-token";
pub const CACHE_VOLUME: &str = "hopwise-cache";
/// The label naming the mesh service a pod is a copy of; without it, its ServiceAccount's name
/// (the mesh file's default ServiceAccount of a service is its name).
pub const SERVICE_LABEL: &str = "hopwise.dev/service";
/// A pod annotation listing, comma-separated, the labels its copy registers with (for route
/// subsets); without it, all of the pod's but the controllers' hashes and hopwise's own.
pub const LABELS: &str = "hopwise.dev/labels";
/// A pod annotation naming the port the proxy hands inbound requests to (the app's), when its
/// first container's first TCP port is not it.
pub const APP_PORT: &str = "hopwise.dev/app-port";
/// The audience of the projected ServiceAccount token the proxy presents to the control plane,
/// which checks it with a TokenReview of the same audience.
pub const TOKEN_AUDIENCE: &str = "hopwise";

/// The proxy's ports in the pod: capture (the rules redirect the app's outbound TCP here;
/// `hopwise run`'s port), inbound mutual TLS (the rules redirect the pod's inbound TCP here),
/// admin (`/ready`, `/metrics`).
pub const CAPTURE_PORT: u16 = 4140;
pub const INBOUND_PORT: u16 = 4143;
pub const ADMIN_PORT: u16 = 4191;

/// What every injection adds, the same for every pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inject {
    /// The image holding `hopwise` and `hopwise-proxy`.
    pub image: String,
    /// The control plane, as the proxy dials it (`https://hopwise-control.hopwise.svc:7900`).
    pub control: String,
    /// The uid the proxy runs as; the capture rules let its connections through.
    pub proxy_uid: i64,
    /// The projected token's lifetime (the kubelet renews it at 80 %).
    pub token_seconds: i64,
    /// The control plane's CA (PEM), which its certificate must chain to: given to the proxy
    /// in its environment. Without it the proxy has no way to trust the control plane.
    pub control_ca_pem: Option<String>,
}

impl Inject {
    /// The defaults for `image`.
    pub fn new(image: impl Into<String>, control: impl Into<String>) -> Inject {
        Inject {
            image: image.into(),
            control: control.into(),
            proxy_uid: 2140,
            token_seconds: 86_400,
            control_ca_pem: None,
        }
    }
}

/// What to do with one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Admitted unchanged, for this reason.
    Skip(Skip),
    /// Admitted with this patch.
    Inject(json_patch::Patch),
    /// Refused: injecting it would leave it unprotected while it looks meshed.
    Refuse(String),
}

/// Why a pod is admitted unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// `hopwise.dev/inject: disabled` as an annotation or a label.
    OptedOut,
    /// It carries the injected mark, or a container or volume of ours.
    Injected,
}

impl Skip {
    pub fn reason(self) -> &'static str {
        match self {
            Skip::OptedOut => "opted out (hopwise.dev/inject: disabled)",
            Skip::Injected => "already injected",
        }
    }
}

/// Whether and how to inject `pod` (one that opted in: see the module's doc).
pub fn decide(pod: &Pod, inject: &Inject) -> Decision {
    let meta = &pod.metadata;
    let says = |m: &Option<std::collections::BTreeMap<String, String>>| {
        m.as_ref().and_then(|m| m.get(INJECT)).map(String::as_str) == Some(DISABLED)
    };
    if says(&meta.annotations) || says(&meta.labels) {
        return Decision::Skip(Skip::OptedOut);
    }
    if injected(pod) {
        return Decision::Skip(Skip::Injected);
    }
    let Some(spec) = &pod.spec else {
        return Decision::Refuse("the pod has no spec".to_owned());
    };
    if spec.host_network == Some(true) {
        return Decision::Refuse(
            "a pod on the host's network cannot be injected: its capture rules would be the \
             node's; set the annotation hopwise.dev/inject: disabled"
                .to_owned(),
        );
    }
    if let Some(name) = as_proxy_uid(pod, inject.proxy_uid) {
        return Decision::Refuse(format!(
            "container {name} runs as uid {}, the proxy's: the capture rules let that uid's \
             connections through, so it would bypass the mesh",
            inject.proxy_uid
        ));
    }
    let app_port = match app_port(pod) {
        Ok(port) => port,
        Err(why) => return Decision::Refuse(why),
    };
    let (rewrites, probes) = match probes::rewrite(pod) {
        Ok(moved) => moved,
        Err(why) => return Decision::Refuse(why),
    };
    let labels = match labels::of(pod) {
        Ok(labels) => labels,
        Err(why) => return Decision::Refuse(why),
    };
    let copy = sidecar::Copy {
        service: service_of(pod),
        app_port,
        probes,
        labels,
    };
    let additions = sidecar::Additions::new(inject, &copy);
    match patch::patch(pod, &additions, &rewrites) {
        Ok(patch) => Decision::Inject(patch),
        Err(e) => Decision::Refuse(format!("writing the patch: {e}")),
    }
}

/// The mesh service `pod` is a copy of: its `hopwise.dev/service` label, else its
/// ServiceAccount's name (`default` when it names none, as the patch sets).
pub fn service_of(pod: &Pod) -> String {
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_LABEL));
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_ref());
    label
        .or(account)
        .filter(|name| !name.is_empty())
        .map_or_else(|| "default".to_owned(), String::clone)
}

/// The port the app serves on, where the proxy hands it inbound requests: the pod's
/// `hopwise.dev/app-port` annotation, else its first container's first TCP port; `None` when it
/// declares none (the proxy then answers inbound requests 503 `no-endpoint`). An annotation
/// that is no port is an error, naming it.
pub fn app_port(pod: &Pod) -> Result<Option<u16>, String> {
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APP_PORT));
    if let Some(text) = annotation {
        return match text.trim().parse::<u16>() {
            Ok(port) if port != 0 => not_the_proxys(port, &format!("the annotation {APP_PORT}")),
            _ => Err(format!(
                "the annotation {APP_PORT}: `{text}` is not a port (1 to 65535)"
            )),
        };
    }
    let first = pod.spec.as_ref().and_then(|s| s.containers.first());
    let tcp = first
        .and_then(|c| c.ports.as_ref())
        .into_iter()
        .flatten()
        .find(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"));
    match tcp
        .and_then(|p| u16::try_from(p.container_port).ok())
        .filter(|p| *p != 0)
    {
        Some(port) => not_the_proxys(port, "the first container's first TCP port"),
        None => Ok(None),
    }
}

/// `port`, unless the proxy listens there in the pod: handing inbound requests to it would send
/// them back to the proxy.
fn not_the_proxys(port: u16, what: &str) -> Result<Option<u16>, String> {
    if [CAPTURE_PORT, INBOUND_PORT, ADMIN_PORT].contains(&port) {
        return Err(format!(
            "{what}, {port}, is one of the proxy's ({CAPTURE_PORT}, {INBOUND_PORT}, \
             {ADMIN_PORT}): set {APP_PORT} to the port the app serves on"
        ));
    }
    Ok(Some(port))
}

/// The mark, or any name of ours among the containers and volumes.
fn injected(pod: &Pod) -> bool {
    let marked = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(INJECTED));
    let Some(spec) = &pod.spec else {
        return marked;
    };
    let ours = |n: &str| [PROXY_CONTAINER, INIT_CONTAINER, TOKEN_VOLUME, CACHE_VOLUME].contains(&n);
    let containers = spec.containers.iter();
    let names = containers
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .chain(spec.volumes.iter().flatten().map(|v| v.name.as_str()));
    marked || names.into_iter().any(ours)
}

/// The first of the pod's containers (init ones too) that would run as `uid`: its own
/// `runAsUser`, else the pod's.
fn as_proxy_uid(pod: &Pod, uid: i64) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    let pod_uid = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let containers = spec.init_containers.iter().flatten();
    containers.chain(&spec.containers).find_map(|c| {
        let own = c.security_context.as_ref().and_then(|s| s.run_as_user);
        (own.or(pod_uid) == Some(uid)).then_some(c.name.as_str())
    })
}

#[cfg(test)]
mod tests;
