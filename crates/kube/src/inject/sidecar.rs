//! What injection adds to a pod, as Kubernetes types: the init container that loads the capture
//! rules (`hopwise capture-init`, hopwise-lab's `capture/plan/pod.rs`: `hopwise run`'s redirect of
//! every outbound TCP connection to the capture port, inbound TCP to the proxy's inbound port,
//! the proxy's uid let through — it shares the pod's network namespace with the app, so no
//! namespace boundary exempts it), the proxy as a native sidecar (an init container with
//! `restartPolicy: Always`, so it starts before the app's containers and is stopped after
//! them), the downward-API environment it needs, and its volumes (a projected ServiceAccount
//! token for the `hopwise` audience, an in-memory directory for its key and cache). Pure data,
//! the same for every pod.

use hopwise_model::app_probe::{self, AppProbes};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, Probe, ProjectedVolumeSource, SecurityContext,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    ADMIN_PORT, CACHE_VOLUME, CAPTURE_PORT, INBOUND_PORT, INIT_CONTAINER, Inject, PROXY_CONTAINER,
    TOKEN_AUDIENCE, TOKEN_VOLUME,
};

/// Where the proxy finds its token and keeps its key, certificate and last snapshot.
pub const TOKEN_DIR: &str = "/var/run/secrets/hopwise.dev/serviceaccount";
pub const TOKEN_FILE: &str = "token";
pub const CACHE_DIR: &str = "/var/run/hopwise";
/// The variable holding the control plane's CA (PEM) for the proxy (`hopwise proxy` reads it
/// when no `--control-ca` is given).
pub const CONTROL_CA_ENV: &str = "HOPWISE_CONTROL_CA_PEM";

/// The proxy's environment from the downward API: the variable and the pod's field.
pub const DOWNWARD_ENV: [(&str, &str); 4] = [
    ("HOPWISE_POD_NAME", "metadata.name"),
    ("HOPWISE_POD_NAMESPACE", "metadata.namespace"),
    ("HOPWISE_SERVICE_ACCOUNT", "spec.serviceAccountName"),
    ("HOPWISE_POD_IP", "status.podIP"),
];

/// What this pod's copy is: its service, the port its app serves on, the app's probes its
/// proxy runs (`probes.rs`), the labels it registers with (`labels.rs`).
#[derive(Debug, Clone)]
pub(super) struct Copy {
    pub service: String,
    pub app_port: Option<u16>,
    pub probes: AppProbes,
    pub labels: Vec<(String, String)>,
}

/// The containers (in the order they go first among the init containers) and the volumes.
#[derive(Debug, Clone)]
pub(super) struct Additions {
    pub init: Container,
    pub proxy: Container,
    pub volumes: Vec<Volume>,
}

impl Additions {
    /// What `copy` gets.
    pub fn new(inject: &Inject, copy: &Copy) -> Additions {
        Additions {
            init: init(inject),
            proxy: proxy(inject, copy),
            volumes: volumes(inject),
        }
    }
}

fn init(inject: &Inject) -> Container {
    // The capture port is `hopwise run`'s, fixed (CAPTURE_PORT): the proxy's `--capture`.
    let args = [
        "capture-init".to_owned(),
        "--proxy-uid".to_owned(),
        inject.proxy_uid.to_string(),
        "--inbound-port".to_owned(),
        INBOUND_PORT.to_string(),
        "--admin-port".to_owned(),
        ADMIN_PORT.to_string(),
    ];
    Container {
        name: INIT_CONTAINER.to_owned(),
        image: Some(inject.image.clone()),
        command: Some(vec!["hopwise".to_owned()]),
        args: Some(args.into()),
        // Root for the rules, with only the two capabilities they need.
        security_context: Some(SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".to_owned(), "NET_RAW".to_owned()]),
                drop: Some(vec!["ALL".to_owned()]),
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

fn proxy(inject: &Inject, copy: &Copy) -> Container {
    // `$(VAR)` is the kubelet's: it puts the container's variable in the argument.
    let mut args = vec![
        "--service".to_owned(),
        copy.service.clone(),
        "--name".to_owned(),
        "$(HOPWISE_POD_NAME)".to_owned(),
        "--control".to_owned(),
        inject.control.clone(),
        "--token-file".to_owned(),
        format!("{TOKEN_DIR}/{TOKEN_FILE}"),
        "--cache".to_owned(),
        CACHE_DIR.to_owned(),
        "--capture".to_owned(),
        format!("127.0.0.1:{CAPTURE_PORT}"),
        "--inbound".to_owned(),
        format!("0.0.0.0:{INBOUND_PORT}"),
        "--advertise".to_owned(),
        "$(HOPWISE_POD_IP)".to_owned(),
        "--admin".to_owned(),
        format!("0.0.0.0:{ADMIN_PORT}"),
        // The kubelet probes `/ready` at the pod's IP.
        "--allow-remote-admin".to_owned(),
    ];
    // Inbound requests go to the app at the pod's IP (`--advertise`), not loopback: a listener
    // the app keeps to loopback stays out of the mesh's reach, as Istio's do.
    if let Some(port) = copy.app_port {
        args.extend(["--app-port".to_owned(), port.to_string()]);
    }
    // Label keys and values hold no `$(`, so the kubelet expands nothing in them.
    for (key, value) in &copy.labels {
        args.extend(["--label".to_owned(), format!("{key}={value}")]);
    }
    let env = DOWNWARD_ENV.iter().map(|(name, field)| EnvVar {
        name: (*name).to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: (*field).to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    });
    // The control plane's CA as text: no file of the control plane's can be mounted in every
    // namespace, and it is no secret.
    let ca = inject.control_ca_pem.iter().map(|pem| EnvVar {
        name: CONTROL_CA_ENV.to_owned(),
        value: Some(pem.clone()),
        value_from: None,
    });
    // The app's probes the kubelet now asks the admin port for, as the proxy runs them.
    let probes = (!copy.probes.is_empty()).then(|| EnvVar {
        name: app_probe::ENV.to_owned(),
        value: Some(copy.probes.to_json()),
        value_from: None,
    });
    let ready = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/ready".to_owned()),
            port: IntOrString::Int(ADMIN_PORT.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(1),
        failure_threshold: Some(120),
        ..Probe::default()
    };
    let port = |name: &str, port: u16| ContainerPort {
        name: Some(name.to_owned()),
        container_port: port.into(),
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    Container {
        name: PROXY_CONTAINER.to_owned(),
        image: Some(inject.image.clone()),
        command: Some(vec!["hopwise-proxy".to_owned()]),
        args: Some(args),
        env: Some(env.chain(ca).chain(probes).collect()),
        // A native sidecar: started before the app's containers, stopped after them.
        restart_policy: Some("Always".to_owned()),
        ports: Some(vec![
            port("hopwise-inbound", INBOUND_PORT),
            port("hopwise-admin", ADMIN_PORT),
        ]),
        // The app's containers start once the proxy has its identity and configuration.
        startup_probe: Some(ready.clone()),
        readiness_probe: Some(Probe {
            failure_threshold: Some(3),
            ..ready
        }),
        security_context: Some(SecurityContext {
            run_as_user: Some(inject.proxy_uid),
            run_as_group: Some(inject.proxy_uid),
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: TOKEN_VOLUME.to_owned(),
                mount_path: TOKEN_DIR.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: CACHE_VOLUME.to_owned(),
                mount_path: CACHE_DIR.to_owned(),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    }
}

fn volumes(inject: &Inject) -> Vec<Volume> {
    let token = Volume {
        name: TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(TOKEN_AUDIENCE.to_owned()),
                    expiration_seconds: Some(inject.token_seconds),
                    path: TOKEN_FILE.to_owned(),
                    // Alpha (a feature gate): the kubelet's default mode lets any uid read it.
                    user: None,
                }),
                ..VolumeProjection::default()
            }]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    };
    let cache = Volume {
        name: CACHE_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    };
    vec![token, cache]
}
