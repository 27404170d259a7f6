//! `hopwise proxy`: its arguments, and running it. The sidecar runs as its own small binary,
//! `hopwise-proxy`, installed beside `hopwise`: `hopwise proxy ARGS` checks the arguments and
//! replaces itself with `hopwise-proxy ARGS` (same process id, so supervisors and `/proc`
//! readings see no difference). That binary holds the proxy's code and nothing of the control
//! plane, the analyser or the lab, so the pages a running sidecar maps are the proxy's own; it
//! needs no link-order list to stay small (docs/performance.md, "Memory"). When
//! `hopwise-proxy` is not beside `hopwise`, or is from another build, the proxy runs in
//! `hopwise`'s process, as it did before.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// The sidecar's binary, looked for in the directory of the running `hopwise`.
pub const SIDECAR_BIN: &str = "hopwise-proxy";

#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// The mesh file (or `--control`: the control plane sends it).
    #[arg(long, required_unless_present = "control")]
    config: Option<PathBuf>,
    /// The control plane (`https://HOST:PORT`, TLS only): identity, configuration and copies
    /// from it. Several replicas: comma-separated or the flag repeated; the proxy uses one at a
    /// time and moves to the next when it fails.
    #[arg(long, requires = "token_file", value_delimiter = ',')]
    control: Vec<String>,
    /// The CA bundle the control plane's certificate must chain to: its `STATE/ca.pem`. After
    /// the first snapshot the proxy also trusts the mesh's bundle (kept in --cache). Absent:
    /// the PEM text of `$HOPWISE_CONTROL_CA_PEM` (what injection gives a pod's proxy).
    #[arg(long)]
    control_ca: Option<PathBuf>,
    /// The join token of this service (`hopwise control` writes `STATE/tokens/<service>`), or on
    /// Kubernetes the pod's projected ServiceAccount token. Read again for every call, so a
    /// token replaced on disk is used from the next call on.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The IP other proxies reach this one at, registered with the control plane when
    /// --inbound is an unspecified address (`0.0.0.0:4143`); on Kubernetes the pod's IP.
    #[arg(long, requires = "control")]
    advertise: Option<std::net::IpAddr>,
    /// A label this copy carries, `KEY=VALUE` (repeatable): registered with the control plane,
    /// so a route backend's `subset` selects it (in a mesh file: `copies[i].labels`).
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "control",
          value_parser = hopwise_model::labels::parse_pair)]
    labels: Vec<(String, String)>,
    /// This proxy's name in `hopwise status` and the dashboard (default `<service>-<copy>`; an
    /// injected proxy is given its pod's name).
    #[arg(long)]
    name: Option<String>,
    /// Where a control-plane proxy keeps its certificate and last snapshot.
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The app's health check path (control plane mode).
    #[arg(long, default_value = "/")]
    health_path: String,
    /// The lease of this copy in the registry: it leaves the endpoint sets this long after
    /// its proxy stops renewing (control plane mode).
    #[arg(long, default_value = "10s")]
    lease_ttl: hopwise_model::Dur,
    /// Listen here for mutual TLS from other proxies (overrides the mesh file). `0.0.0.0:P`
    /// with an IPv6 --advertise: `[::]:P` (both families).
    #[arg(long)]
    inbound: Option<std::net::SocketAddr>,
    /// The app's address (overrides the mesh file).
    #[arg(long)]
    app: Option<std::net::SocketAddr>,
    /// The app's port at the --advertise IP (loopback without it): what injection gives a
    /// pod's proxy, the app reached at the pod's IP as its other containers see it.
    #[arg(long, conflicts_with = "app")]
    app_port: Option<u16>,
    /// The admin endpoint (overrides the mesh file). `0.0.0.0:P` with an IPv6 --advertise:
    /// `[::]:P` (both families).
    #[arg(long)]
    admin: Option<std::net::SocketAddr>,
    /// The HTTP-proxy port (overrides the mesh file).
    #[arg(long)]
    outbound: Option<std::net::SocketAddr>,
    /// A local port for an upstream, `SERVICE=ADDR` (repeatable; overrides the mesh file).
    #[arg(long, value_parser = hopwise_lab::samples::apps::parse_upstream)]
    upstream: Vec<(String, std::net::SocketAddr)>,
    /// A capture listener here (`hopwise run` and a captured `hopwise up` set it,
    /// docs/capture.md): connections the namespace's rules redirect, sent on by their original
    /// destination (the services' addresses of the mesh file in force at start).
    #[arg(long)]
    capture: Option<std::net::SocketAddr>,
    /// The network namespace the capture listener is bound in (`/run/netns/NAME`).
    #[arg(long, requires = "capture")]
    capture_netns: Option<PathBuf>,
    /// The service whose proxy this is.
    #[arg(long)]
    service: String,
    /// Which copy of the service (its index under `copies`).
    #[arg(long, default_value_t = 0)]
    copy: usize,
    /// Certificates directory (default: the mesh file's `mesh.certs`).
    #[arg(long)]
    certs: Option<PathBuf>,
    /// Worker threads, each with its own event loop.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// No TLS between proxies (for measuring the plain path; never in production).
    #[arg(long)]
    plaintext: bool,
    /// Open connections each listener (inbound, the HTTP-proxy port, each per-upstream port)
    /// holds at once; past it new ones are closed at once. The admin listener holds 64.
    #[arg(long, default_value_t = hopwise_proxy::listeners::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    listener_connections: u64,
    /// Let the outbound listeners (per-upstream ports, the HTTP-proxy port) bind an address
    /// other than loopback: whoever reaches them calls the mesh as this service.
    #[arg(long)]
    allow_remote_outbound: bool,
    /// Let the admin listener bind an address other than loopback (it serves the
    /// configuration and the metrics).
    #[arg(long)]
    allow_remote_admin: bool,
}

/// Set by `hopwise` on the sidecar it execs: the build it expects (see [`BUILD_ID`]).
const EXPECT_ENV: &str = "HOPWISE_SIDECAR_BUILD";
/// Set by `hopwise` on the sidecar it execs: the `hopwise` to go back to if that build differs.
const FROM_ENV: &str = "HOPWISE_SIDECAR_FROM";
/// `off`: `hopwise proxy` runs the proxy in its own process.
const MODE_ENV: &str = "HOPWISE_SIDECAR";

/// Both binaries of one build carry the same id (`build.rs`; a new one whenever the proxy's
/// sources or the lock file change), so a `hopwise-proxy` left from an older build — `cargo run`
/// rebuilds only `hopwise` — is never run in place of today's proxy.
pub const BUILD_ID: &str = env!("HOPWISE_BUILD_ID");

/// `hopwise proxy` (or `hopwise gateway`, the same proxy for a gateway service: `word` is the
/// subcommand given): become `hopwise-proxy` with the same arguments, or run here without it.
pub fn start(a: ProxyArgs, word: &str) -> anyhow::Result<ExitCode> {
    let in_process = std::env::var_os(MODE_ENV).is_some_and(|v| v == "off");
    if let (false, Some(bin), Ok(me)) = (in_process, sidecar_bin(), std::env::current_exe()) {
        // Everything after the subcommand, as given (clap has checked it already).
        let args = std::env::args_os().skip_while(|s| s != word).skip(1);
        let err = std::process::Command::new(&bin)
            .args(args)
            .env(EXPECT_ENV, BUILD_ID)
            .env(FROM_ENV, me)
            .exec();
        // exec returns only when it failed; the proxy can still run in this process.
        note(&format!(
            "cannot run {}: {err}; running the proxy in this process",
            bin.display()
        ));
    }
    run(a)
}

/// In `hopwise-proxy`, before anything else: when `hopwise` started it from another build, go
/// back to that `hopwise` and run the proxy in its process. Returns only when this build is
/// the expected one (or no one said which).
pub fn same_build_or_back() -> anyhow::Result<()> {
    let expected = std::env::var_os(EXPECT_ENV);
    let Some(expected) = expected.filter(|e| e != BUILD_ID) else {
        return Ok(());
    };
    let from =
        std::env::var_os(FROM_ENV).context("HOPWISE_SIDECAR_BUILD without HOPWISE_SIDECAR_FROM")?;
    note(&format!(
        "{SIDECAR_BIN} is from another build ({} here, {} expected); running the proxy in hopwise",
        BUILD_ID,
        expected.to_string_lossy()
    ));
    let err = std::process::Command::new(&from)
        .arg("proxy")
        .args(std::env::args_os().skip(1))
        .env(MODE_ENV, "off")
        .exec();
    Err(anyhow::anyhow!(
        "cannot run {}: {err}",
        PathBuf::from(from).display()
    ))
}

fn sidecar_bin() -> Option<PathBuf> {
    let bin = std::env::current_exe().ok()?.with_file_name(SIDECAR_BIN);
    bin.is_file().then_some(bin)
}

#[allow(clippy::print_stderr)]
fn note(text: &str) {
    eprintln!("hopwise: {text}");
}

/// A listener on every IPv4 address (`0.0.0.0`, what injection writes) listens on every
/// address (`[::]`, which takes IPv4 too) when the advertised IP is IPv6: an IPv6 pod is
/// reached at its IP, by other proxies and by the kubelet's probes. Any other as given.
fn in_family(listen: SocketAddr, advertise: Option<IpAddr>) -> SocketAddr {
    match (listen.ip(), advertise) {
        (IpAddr::V4(v4), Some(IpAddr::V6(_))) if v4.is_unspecified() => {
            SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), listen.port())
        }
        _ => listen,
    }
}

/// `--app-port`: the app at the advertised IP, else loopback.
fn app_at_port(a: &ProxyArgs) -> Option<std::net::SocketAddr> {
    let ip = a.advertise.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    a.app_port.map(|port| std::net::SocketAddr::new(ip, port))
}

/// The app's kubelet probes an injected pod's proxy runs (`$HOPWISE_APP_PROBES`, written by
/// injection), at the app's IP as the kubelet would have probed it: `--advertise`, else
/// loopback. A variable that cannot be read stops the proxy: a pod whose probes cannot run
/// would never be ready, and saying why beats a probe failing for no reason the kubelet shows.
fn app_probes(a: &ProxyArgs) -> anyhow::Result<Option<hopwise_proxy::app_probe::AppProbeTarget>> {
    use hopwise_model::app_probe::{AppProbes, ENV};
    let Some(text) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let text = text
        .into_string()
        .map_err(|_| anyhow::anyhow!("${ENV} is not UTF-8"))?;
    let probes = AppProbes::parse(&text)?;
    if probes.is_empty() {
        return Ok(None);
    }
    let ip = a.advertise.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    Ok(Some(hopwise_proxy::app_probe::AppProbeTarget {
        ip,
        probes,
    }))
}

/// The capture listener the command line asks for, mapping by `destinations`.
fn capture(
    a: &ProxyArgs,
    destinations: hopwise_model::capture::Destinations,
) -> Option<hopwise_proxy::config::CaptureConfig> {
    a.capture
        .map(|listen| hopwise_proxy::config::CaptureConfig {
            netns: a.capture_netns.clone(),
            listen,
            destinations,
        })
}

/// Where the control plane's CA is: `--control-ca`, else `$HOPWISE_CONTROL_CA_PEM`'s text written
/// into the cache directory (an injected pod gets the CA in its environment, as no file of the
/// control plane's can be mounted in every namespace).
fn control_ca(flag: Option<&PathBuf>, cache: &std::path::Path) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path.clone());
    }
    let pem = std::env::var(CONTROL_CA_ENV).unwrap_or_default();
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        anyhow::bail!(
            "--control needs --control-ca FILE (the control plane's STATE/ca.pem), or the CA's PEM \
             in ${CONTROL_CA_ENV}"
        );
    }
    std::fs::create_dir_all(cache)
        .with_context(|| format!("cannot make the cache directory {}", cache.display()))?;
    let path = cache.join("control-ca.pem");
    std::fs::write(&path, pem).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The control plane's CA as PEM text, when no `--control-ca` file is given.
pub const CONTROL_CA_ENV: &str = "HOPWISE_CONTROL_CA_PEM";

#[allow(clippy::print_stdout)]
/// The proxy of one copy, until SIGTERM or Ctrl-C; then it leaves the endpoint sets and drains.
pub fn run(a: ProxyArgs) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    // One small runtime for signals and the control-plane session; the proxy's workers run
    // their own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal handler")?;
    let servers: Vec<String> = a
        .control
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let (mut config, session) = match (servers.is_empty(), &a.config) {
        (false, _) => {
            let token_file = a
                .token_file
                .as_ref()
                .context("--control needs --token-file")?;
            let token = hopwise_proxy::control::Token::from_file(token_file.clone())
                .with_context(|| format!("cannot read the token {}", token_file.display()))?;
            let cache = a.cache.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("hopwise-{}-{}", a.service, a.copy))
            });
            let control_ca = control_ca(a.control_ca.as_ref(), &cache)?;
            let opts = hopwise_proxy::control::ControlOptions {
                servers: servers.clone(),
                control_ca,
                token,
                service: a.service.clone(),
                copy: a.copy,
                name: a
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", a.service, a.copy)),
                cache,
                health_path: a.health_path.clone(),
                lease_ttl: a.lease_ttl.get(),
                advertise: a.advertise,
                labels: a.labels.iter().cloned().collect(),
            };
            let (mut config, session) = rt
                .block_on(hopwise_proxy::control::bootstrap(opts))
                .with_context(|| format!("cannot start the proxy of {}", a.service))?;
            if a.capture.is_some() {
                config.capture = capture(&a, session.destinations()?);
            }
            (config, Some(session))
        }
        (true, Some(file)) => {
            let (mesh, base) = crate::mesh_file::load(file)?;
            let mut config = hopwise_proxy::ProxyConfig::from_mesh(
                &mesh,
                &a.service,
                a.copy,
                &base,
                a.certs.as_deref(),
            )?;
            config.capture = capture(&a, hopwise_model::capture::Destinations::of(&mesh));
            (config, None)
        }
        (true, None) => anyhow::bail!("give --config FILE or --control URL"),
    };
    config.workers = a.workers.max(1);
    config.plaintext = a.plaintext;
    config.listeners = hopwise_proxy::listeners::ListenerPolicy {
        max_connections: usize::try_from(a.listener_connections).unwrap_or(usize::MAX),
        allow_remote_outbound: a.allow_remote_outbound,
        allow_remote_admin: a.allow_remote_admin,
    };
    config.inbound = a
        .inbound
        .or(config.inbound)
        .map(|l| in_family(l, a.advertise));
    config.app = a.app.or(app_at_port(&a)).or(config.app);
    config.admin = a.admin.or(config.admin).map(|l| in_family(l, a.advertise));
    config.outbound = a.outbound.or(config.outbound);
    config.app_probes = app_probes(&a)?;
    anyhow::ensure!(
        config.app_probes.is_none() || config.admin.is_some(),
        "${} names the app's probes, which the admin port runs: give --admin",
        hopwise_model::app_probe::ENV
    );
    for (name, addr) in &a.upstream {
        anyhow::ensure!(
            config.clusters.contains_key(name),
            "--upstream {name}=…: {} does not call {name}",
            a.service
        );
        config.upstream_ports.insert(name.clone(), *addr);
    }
    let running = hopwise_proxy::start(config)
        .with_context(|| format!("cannot start the proxy of {}", a.service))?;
    let (stop_session, session_stopped) = tokio::sync::watch::channel(false);
    let session_task = session.map(|s| {
        let state = running.state.clone();
        let bound = running.bound.clone();
        rt.spawn(async move { s.run(state, &bound, session_stopped).await })
    });
    let b = &running.bound;
    let show = |a: Option<std::net::SocketAddr>| a.map_or("-".to_owned(), |a| a.to_string());
    println!(
        "hopwise proxy for {} (copy {}): inbound {} outbound {} admin {}{}{}",
        a.service,
        a.copy,
        show(b.inbound),
        show(b.outbound),
        show(b.admin),
        b.upstreams
            .iter()
            .map(|(n, a)| format!(" {n}@{a}"))
            .collect::<String>(),
        b.capture
            .map(|c| format!(" capture {c}"))
            .unwrap_or_default(),
    );
    if b.gateway_http.is_some() || b.gateway_https.is_some() {
        println!(
            "gateway {}: http {} https {}",
            a.service,
            show(b.gateway_http),
            show(b.gateway_https)
        );
    }
    // Wait for SIGTERM or Ctrl-C, then drain.
    rt.block_on(hopwise_proxy::server::shutdown_signal());
    tracing::info!("draining");
    // Leave the endpoint sets first, so no new request is sent here while we drain.
    let _ = stop_session.send(true);
    if let Some(task) = session_task {
        let _ = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(3), task).await
        });
    }
    running.shutdown();
    running.wait();
    Ok(ExitCode::SUCCESS)
}
