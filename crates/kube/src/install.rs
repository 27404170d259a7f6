//! What `hopwise install` prints: every object a cluster needs to run hopwise's control plane
//! and its injection webhook, as one `v1` `List` (JSON, which `kubectl apply --server-side -f -`
//! reads as it reads YAML). The namespace (never injected itself), the control plane's
//! ServiceAccount and its ClusterRole (TokenReviews to check proxies' tokens; Services,
//! EndpointSlices, Pods and Namespaces to watch; HTTPRoutes, GRPCRoutes and the `Mesh` and their
//! status), the webhook's serving certificate as a Secret, the control plane's Deployment (the
//! control plane and the webhook, one container each, from one image) and Service, the
//! `MutatingWebhookConfiguration` of `registration.rs` and its `Mesh` validation, and the `Mesh`
//! CRD of `mesh_resource.rs`.
//! Pure but for the certificate's fresh key.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Namespace, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Secret,
    SecretVolumeSource, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::cert::ServingCert;
use crate::inject::{DISABLED, INJECT};
use crate::registration::{self, Target};

/// The control plane's name: its ServiceAccount, roles, Deployment and Service.
pub const CONTROL: &str = "hopwise-control";
/// The Secret holding the webhook's serving certificate.
pub const WEBHOOK_SECRET: &str = "hopwise-webhook-tls";
/// The control port (`hopwise control --listen`) and the webhook's, in the pod.
pub const CONTROL_PORT: u16 = 7900;
pub const WEBHOOK_PORT: u16 = 9443;
/// The claim holding the control plane's state: its CA above all, which every injected proxy
/// trusts — state lost with a pod would cut every meshed pod off from a new control plane.
pub const STATE_CLAIM: &str = "hopwise-control-state";
/// The control plane's state directory in its pod (`--state`); the webhook reads its `ca.pem`.
pub const STATE_DIR: &str = "/var/lib/hopwise";
/// Where the webhook's container finds its certificate.
pub const WEBHOOK_CERT_DIR: &str = "/var/run/hopwise/webhook";

/// What an install is made of.
#[derive(Debug, Clone)]
pub struct Install {
    /// The namespace of the control plane (`hopwise`).
    pub namespace: String,
    /// The image holding `hopwise` and `hopwise-proxy`, for the control plane and the sidecars.
    pub image: String,
    /// The webhook's serving certificate, for `hopwise-control.<namespace>.svc`.
    pub webhook_cert: ServingCert,
}

impl Install {
    /// With a fresh serving certificate for the webhook's Service.
    pub fn new(namespace: &str, image: &str) -> Result<Install, rcgen::Error> {
        let service = format!("{CONTROL}.{namespace}.svc");
        let local = format!("{service}.cluster.local");
        Ok(Install {
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            webhook_cert: crate::cert::serving(&[&service, &local])?,
        })
    }

    /// The URL proxies dial the control plane at.
    pub fn control_url(&self) -> String {
        format!("https://{CONTROL}.{}.svc:{CONTROL_PORT}", self.namespace)
    }
}

/// Every object, in the order they can be created in, as a `v1` `List`.
pub fn manifests(install: &Install) -> Result<Value, serde_json::Error> {
    let target = Target::Service {
        namespace: install.namespace.clone(),
        name: CONTROL.to_owned(),
        port: 443,
    };
    let ca = &install.webhook_cert.ca_pem;
    let schema = serde_json::to_value(hopwise_model::schema())?;
    let items = vec![
        crate::mesh_resource::definition(&schema),
        serde_json::to_value(namespace(install))?,
        serde_json::to_value(ServiceAccount {
            metadata: meta(CONTROL, Some(&install.namespace)),
            ..ServiceAccount::default()
        })?,
        serde_json::to_value(cluster_role())?,
        serde_json::to_value(binding(install))?,
        serde_json::to_value(secret(install))?,
        serde_json::to_value(state_claim(install))?,
        serde_json::to_value(deployment(install))?,
        serde_json::to_value(service(install))?,
        serde_json::to_value(registration::configuration(&target, ca, &install.namespace))?,
        serde_json::to_value(registration::mesh_validation(&target, ca))?,
    ];
    Ok(json!({ "apiVersion": "v1", "kind": "List", "items": items }))
}

fn labels(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([("app.kubernetes.io/part-of".to_owned(), "hopwise".to_owned())]);
    l.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    l
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(labels(&[])),
        ..ObjectMeta::default()
    }
}

fn namespace(install: &Install) -> Namespace {
    let mut metadata = meta(&install.namespace, None);
    metadata.labels = Some(labels(&[(INJECT, DISABLED)]));
    Namespace {
        metadata,
        ..Namespace::default()
    }
}

fn cluster_role() -> ClusterRole {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(groups.iter().map(|g| (*g).to_owned()).collect()),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    let watch = ["get", "list", "watch"];
    let gateway = "gateway.networking.k8s.io";
    ClusterRole {
        metadata: meta(CONTROL, None),
        rules: Some(vec![
            // A proxy's projected token, checked for the `hopwise` audience.
            rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
            rule(&[""], &["services", "pods", "namespaces"], &watch),
            rule(&["discovery.k8s.io"], &["endpointslices"], &watch),
            rule(&[gateway], &["httproutes", "grpcroutes"], &watch),
            rule(
                &[gateway],
                &["httproutes/status", "grpcroutes/status"],
                &["patch", "update"],
            ),
            // The mesh file as a resource (mesh_resource.rs), and what was made of it.
            rule(&[crate::mesh_resource::GROUP], &["meshes"], &watch),
            rule(
                &[crate::mesh_resource::GROUP],
                &["meshes/status"],
                &["patch", "update"],
            ),
        ]),
        ..ClusterRole::default()
    }
}

fn binding(install: &Install) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(CONTROL, None),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "ClusterRole".to_owned(),
            name: CONTROL.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: CONTROL.to_owned(),
            namespace: Some(install.namespace.clone()),
            api_group: None,
        }]),
    }
}

fn secret(install: &Install) -> Secret {
    let c = &install.webhook_cert;
    let data = [("tls.crt", &c.cert_pem), ("tls.key", &c.key_pem)]
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())));
    Secret {
        metadata: meta(WEBHOOK_SECRET, Some(&install.namespace)),
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(BTreeMap::from(data)),
        ..Secret::default()
    }
}

fn deployment(install: &Install) -> Deployment {
    let selector = BTreeMap::from([("app.kubernetes.io/name".to_owned(), CONTROL.to_owned())]);
    let pod_labels = labels(&[("app.kubernetes.io/name", CONTROL), (INJECT, DISABLED)]);
    let container =
        |name: &str, args: Vec<String>, port: u16, mounts: Vec<VolumeMount>| Container {
            name: name.to_owned(),
            image: Some(install.image.clone()),
            command: Some(vec!["hopwise".to_owned()]),
            args: Some(args),
            ports: Some(vec![ContainerPort {
                name: Some(name.to_owned()),
                container_port: port.into(),
                ..ContainerPort::default()
            }]),
            volume_mounts: Some(mounts),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                ..SecurityContext::default()
            }),
            ..Container::default()
        };
    let words = |s: String| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let control = container(
        "control",
        words(format!(
            "control --state {STATE_DIR} --listen 0.0.0.0:{CONTROL_PORT} --kubernetes"
        )),
        CONTROL_PORT,
        vec![mount("state", STATE_DIR, false)],
    );
    let webhook = container(
        "webhook",
        words(format!(
            "webhook --listen 0.0.0.0:{WEBHOOK_PORT} --cert {WEBHOOK_CERT_DIR}/tls.crt \
             --key {WEBHOOK_CERT_DIR}/tls.key --image {} --control {} \
             --control-ca {STATE_DIR}/ca.pem",
            install.image,
            install.control_url()
        )),
        WEBHOOK_PORT,
        // The control plane's state, read-only: its `ca.pem`, which injected proxies get.
        vec![
            mount("webhook-tls", WEBHOOK_CERT_DIR, true),
            mount("state", STATE_DIR, true),
        ],
    );
    let volumes = vec![
        Volume {
            name: "state".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: STATE_CLAIM.to_owned(),
                read_only: None,
            }),
            ..Volume::default()
        },
        Volume {
            name: "webhook-tls".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(WEBHOOK_SECRET.to_owned()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    Deployment {
        metadata: meta(CONTROL, Some(&install.namespace)),
        spec: DeploymentSpec {
            replicas: Some(1),
            // The state's volume is one pod's at a time (and its directory is locked): the old
            // pod goes before the new one starts.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(CONTROL.to_owned()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        // The claimed volume is writable by the pod's group.
                        fs_group: Some(65532),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![control, webhook],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// The control plane's state, kept across its pods: 1 GiB, one node at a time, of the cluster's
/// default storage class.
fn state_claim(install: &Install) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(STATE_CLAIM, Some(&install.namespace)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity("1Gi".to_owned()),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn service(install: &Install) -> Service {
    let port = |name: &str, port: u16, target: u16| ServicePort {
        name: Some(name.to_owned()),
        port: port.into(),
        target_port: Some(IntOrString::Int(target.into())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    };
    Service {
        metadata: meta(CONTROL, Some(&install.namespace)),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                CONTROL.to_owned(),
            )])),
            ports: Some(vec![
                port("control", CONTROL_PORT, CONTROL_PORT),
                port("webhook", 443, WEBHOOK_PORT),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
