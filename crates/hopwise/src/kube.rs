//! `hopwise install` and `hopwise webhook`: the Kubernetes subcommands, over `hopwise-kube`;
//! and `hopwise control --kubernetes`'s token reviewer.
//! A module of the `hopwise` binary alone, never of the library the `hopwise-proxy` sidecar
//! shares with it, so the sidecar never links the kube client (scripts/test checks its symbols).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use hopwise_control::api::PlaneHandle;
use hopwise_control::plane::Refused;
use hopwise_control::review::{ReviewError, ReviewFuture, Reviewed, TokenReviewer};
use hopwise_kube::identity::{TokenError, TokenReviews};
use hopwise_kube::inject::Inject;
use hopwise_kube::install::{self, Install};
use hopwise_kube::routes::Outcome;
use hopwise_kube::webhook::{self, Limits};

pub mod mesh;

/// The image `install` names when none is given: this version's.
const IMAGE: &str = concat!("hopwise:", env!("CARGO_PKG_VERSION"));

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// The control plane's namespace.
    #[arg(long, default_value = "hopwise")]
    namespace: String,
    /// The image holding `hopwise` and `hopwise-proxy` (the control plane's and the sidecars').
    #[arg(long, default_value = IMAGE)]
    image: String,
    /// Print instead the `Mesh` resource holding this mesh file (checked first, as `hopwise
    /// control apply` checks it), for a second `kubectl apply` once the CRD is in.
    #[arg(long, value_name = "MESH.yaml")]
    mesh: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// Where to serve HTTPS.
    #[arg(long, default_value = "0.0.0.0:9443")]
    listen: SocketAddr,
    /// The serving certificate (PEM, leaf first), signed by the registration's `caBundle`.
    #[arg(long)]
    cert: PathBuf,
    /// Its key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// The image injected pods run the proxy and its init container from.
    #[arg(long, default_value = IMAGE)]
    image: String,
    /// The control plane, as injected proxies dial it.
    #[arg(long)]
    control: String,
    /// The control plane's CA (its `STATE/ca.pem`, or the `--ca-cert` it was given): injected
    /// proxies get it in their environment, to trust the control plane by.
    #[arg(long)]
    control_ca: PathBuf,
}

/// Prints the manifests: `hopwise install | kubectl apply --server-side -f -`.
pub fn install(args: &InstallArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.mesh {
        return mesh::print_resource(path);
    }
    let install = Install::new(&args.namespace, &args.image)
        .context("making the webhook's serving certificate")?;
    let list = install::manifests(&install)?;
    let text = serde_json::to_string_pretty(&list)?;
    #[allow(clippy::print_stdout)] // the binary's output
    {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Serves the injection webhook until SIGTERM or Ctrl-C.
pub fn webhook(args: &WebhookArgs) -> anyhow::Result<ExitCode> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
    let tls = webhook::tls(&read(&args.cert)?, &read(&args.key)?)?;
    let mut inject = Inject::new(args.image.clone(), args.control.clone());
    inject.control_ca_pem = Some(control_ca(&args.control_ca)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let handlers = webhook::Handlers {
            inject: Arc::new(inject),
            mesh: Some(Arc::new(mesh::judge)),
        };
        let running = webhook::spawn_with(listener, tls, handlers, Limits::default())?;
        tracing::info!(
            "admission webhook on https://{0}/inject and https://{0}/validate-mesh",
            running.addr()
        );
        hopwise_proxy::server::shutdown_signal().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The control plane's CA, waited for up to a minute: beside the control plane in its pod, the
/// webhook may start before the control plane has written its state.
fn control_ca(path: &PathBuf) -> anyhow::Result<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match std::fs::read_to_string(path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => return Ok(pem),
            Ok(_) | Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Ok(_) => anyhow::bail!("{} holds no PEM certificate", path.display()),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading the control plane's CA {}", path.display()));
            }
        }
    }
}

/// `hopwise control --kubernetes`: the API server's TokenReview vouching for pods' tokens. Its
/// address and credentials are kube's usual ones (a pod's ServiceAccount, else `$KUBECONFIG` or
/// `~/.kube/config`), read now so a control plane that cannot reach them says so at start.
pub fn token_reviewer() -> anyhow::Result<Arc<dyn TokenReviewer>> {
    let reviews = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(TokenReviews::infer())
        .context(
            "--kubernetes: no Kubernetes API server to ask (not in a pod, and no usable \
             $KUBECONFIG or ~/.kube/config)",
        )?;
    tracing::info!(server = %reviews.server(), "pods' ServiceAccount tokens are checked by TokenReview");
    Ok(Arc::new(Reviewer(reviews)))
}

struct Reviewer(TokenReviews);

impl TokenReviewer for Reviewer {
    fn review<'a>(&'a self, token: &'a str) -> ReviewFuture<'a> {
        Box::pin(async move {
            match self.0.review(token).await {
                Ok(t) => Ok(Reviewed {
                    namespace: t.namespace,
                    service_account: t.service_account,
                    pod: t.pod,
                }),
                Err(TokenError::Refused(why)) => Err(ReviewError::Refused(why)),
                Err(TokenError::Unavailable(why)) => Err(ReviewError::Unavailable(why)),
            }
        })
    }
}

/// `hopwise control --kubernetes`: every Service's EndpointSlices, watched, gate the copies of
/// the mesh service of that name in that namespace (only addresses listed ready take traffic),
/// and its ClusterIP is that service's address (what captured apps reach it at).
/// Runs beside the API until the control plane stops; a broken watch is retried and relists.
pub async fn discovery(plane: PlaneHandle) {
    let client = match hopwise_kube::discovery::client().await {
        Ok(c) => c,
        Err(e) => {
            // The TokenReview client was made from the same configuration at start, so this
            // is rare; say it loudly, since no copy is gated meanwhile.
            tracing::error!("--kubernetes: no client for EndpointSlice discovery: {e}");
            return;
        }
    };
    tracing::info!(
        "Services' EndpointSlices gate their copies, their ClusterIPs are their addresses (discovery)"
    );
    let slices = hopwise_kube::discovery::watch(client.clone(), |change| {
        let s = &change.service;
        plane.set_discovered(&s.namespace, &s.name, change.endpoints);
    });
    let services = hopwise_kube::discovery::watch_services(client, |s, front| {
        plane.set_front(&s.namespace, &s.name, front);
    });
    tokio::join!(slices, services);
}

/// A route's status from what the control plane made of it.
fn outcome(verdict: hopwise_control::plane::Verdict) -> Outcome {
    match verdict {
        Ok(()) => Outcome::Accepted,
        Err(Refused::NotFound(why)) => Outcome::Unresolved(why),
        Err(Refused::Invalid(why)) => Outcome::Invalid(why),
    }
}

/// `hopwise control --kubernetes`: HTTPRoutes and GRPCRoutes whose parent is a Service, added
/// to the mesh file the control plane serves (each checked as `apply` checks a file), their
/// `status.parents` written back. Without the Gateway API's CRDs the watch logs that it broke
/// and retries.
pub async fn routes(plane: PlaneHandle) {
    let client = match hopwise_kube::discovery::client().await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("--kubernetes: no client for routes: {e}");
            return;
        }
    };
    let watch = |kind: &'static str| {
        let plane = plane.clone();
        let client = client.clone();
        async move {
            let changed = plane.kube_verdicts_changed();
            let watched = hopwise_kube::routes::Link {
                sink: |namespace: &str, name: &str, route| {
                    plane.set_kube_route(namespace, name, route).map(outcome)
                },
                verdict: |namespace: &str, name: &str| {
                    plane.kube_route_verdict(namespace, name).map(outcome)
                },
                changed,
            };
            hopwise_kube::routes::watch(client, kind, watched).await;
        }
    };
    tokio::join!(watch("HTTPRoute"), watch("GRPCRoute"));
}
