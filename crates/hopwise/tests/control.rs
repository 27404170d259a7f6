//! `hopwise control` as a real process: it starts from a mesh file, writes its state (CA, trust
//! bundle, a token file per service, owner-only), answers `hopwise status` and
//! `hopwise control apply` (a file `hopwise check` rejects exits 1 with the findings), stops on
//! SIGTERM, and after a restart — clean or after SIGKILL — has the same CA, the same tokens and
//! the applied configuration. A second control plane on the same state is refused with exit 2,
//! and so is `--store etcd://…` in a build without the `etcd` feature. The port is TLS only:
//! listening on 0.0.0.0 it is reached at 127.0.0.1 by clients trusting `STATE/ca.pem`; a
//! plaintext client and one trusting another CA are refused; `Apply`, `Status` and `RotateCa`
//! need the admin token.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const MESH: &str = "mesh: { name: shop, trust_domain: shop.local }
services:
  frontend:
    entry: { timeout: 3s }
    calls: { checkout: { timeout: 2s } }
  checkout:
    calls: { pricing: { timeout: 1s } }
  pricing: {}
";

fn hopwise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hopwise"))
}

fn output(args: &[&str]) -> Output {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_hopwise"));
    // Far beyond what a run needs; a run that hangs fails instead of stalling CI.
    cmd.timeout(Duration::from_secs(60));
    cmd.args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A running `hopwise control`, its address, and what it printed on start.
struct Control {
    child: Child,
    addr: String,
    banner: String,
}

impl Control {
    fn start(state: &Path, config: Option<&Path>, log: &Path) -> Control {
        let mut cmd = hopwise();
        cmd.arg("control").arg("--state").arg(state);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .args(["--listen", "127.0.0.1:0", "--cert-lifetime", "1h"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                panic!(
                    "hopwise control ended before it listened: {banner}\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            banner.push_str(&line);
            if line.starts_with("join tokens:") {
                break;
            }
        }
        // The notes that follow come in the same write; read what is there without blocking on
        // more by handing the rest of the pipe to a thread.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
        });
        let addr = banner
            .split_whitespace()
            .skip_while(|w| *w != "on")
            .nth(1)
            .unwrap()
            .to_owned();
        Control {
            child,
            addr,
            banner,
        }
    }

    fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tokens(state: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(state.join("tokens"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_control_plane_keeps_its_ca_tokens_and_configuration_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let log = dir.path().join("control.log");
    let mesh = write(dir.path(), "mesh.yaml", MESH);

    let mut first = Control::start(&state, Some(&mesh), &log);
    assert!(
        first
            .banner
            .contains("(TLS 1.3 as spiffe://shop.local/control)"),
        "{}",
        first.banner
    );
    assert!(
        first.banner.contains("config version 1"),
        "{}",
        first.banner
    );
    let ca = std::fs::read_to_string(state.join("ca.pem")).unwrap();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    let before = tokens(&state);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["checkout", "frontend", "pricing"]
    );
    assert!(before.values().all(|t| t.starts_with("hopwise-join-")));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(state.join("state.json")), 0o600);
        assert_eq!(mode(state.join("tokens/pricing")), 0o600);
        assert_eq!(mode(state.join("admin-token")), 0o600);
    }
    let admin = std::fs::read_to_string(state.join("admin-token")).unwrap();
    assert!(admin.starts_with("hopwise-admin-"), "{admin}");

    // A second control plane on the same state is refused.
    let second = output(&[
        "control",
        "--state",
        state.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(second.status.code(), Some(2), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("locked"),
        "{}",
        text(&second.stderr)
    );

    // status
    let s = state.to_str().unwrap();
    let status = output(&["status", "--server", &first.addr, "--state", s]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    assert!(
        text(&status.stdout).contains("mesh shop"),
        "{}",
        text(&status.stdout)
    );

    // A file `hopwise check` rejects: exit 1 with the findings; nothing changes.
    let storm = write(
        dir.path(),
        "storm.yaml",
        "mesh: { name: shop, trust_domain: shop.local }
defaults: { preset: istio }
services:
  frontend: { entry: { timeout: none }, calls: { checkout: {} } }
  checkout: { protocol: grpc, calls: { pricing: {} } }
  pricing: { protocol: grpc, calls: { inventory: {} } }
  inventory: { protocol: grpc }
",
    );
    let refused = output(&[
        "control",
        "apply",
        storm.to_str().unwrap(),
        "--server",
        &first.addr,
        "--state",
        s,
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stdout).contains("retry-fanout"),
        "{}",
        text(&refused.stdout)
    );
    assert!(
        text(&refused.stdout).contains("refused"),
        "{}",
        text(&refused.stdout)
    );

    // An invalid file: exit 2 with its problems.
    let broken = write(
        dir.path(),
        "broken.yaml",
        "services:\n  a: { timout: 1s }\n",
    );
    let invalid = output(&[
        "control",
        "apply",
        broken.to_str().unwrap(),
        "--server",
        &first.addr,
        "--state",
        s,
    ]);
    assert_eq!(invalid.status.code(), Some(2));
    assert!(
        text(&invalid.stdout).contains("did you mean `timeout`"),
        "{}",
        text(&invalid.stdout)
    );

    // A sound change is applied.
    let edited = write(
        dir.path(),
        "edited.yaml",
        &MESH.replace("timeout: 1s", "timeout: 800ms"),
    );
    let applied = output(&[
        "control",
        "apply",
        edited.to_str().unwrap(),
        "--server",
        &first.addr,
        "--state",
        s,
    ]);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied.stderr));
    assert!(
        text(&applied.stdout).contains("config version 2"),
        "{}",
        text(&applied.stdout)
    );

    // SIGTERM: a clean stop.
    assert!(first.signal("-TERM").success());

    // Restarted with the original --config: the applied file stays in force, and it says so.
    let mut again = Control::start(&state, Some(&mesh), &log);
    assert!(
        again.banner.contains("config version 2"),
        "{}",
        again.banner
    );
    assert!(again.banner.contains("start 2"), "{}", again.banner);
    assert_eq!(std::fs::read_to_string(state.join("ca.pem")).unwrap(), ca);
    assert_eq!(tokens(&state), before);
    let status = output(&["status", "--server", &again.addr, "--state", s]);
    assert!(
        text(&status.stdout).contains("config version 2"),
        "{}",
        text(&status.stdout)
    );

    // SIGKILL, then a restart without --config: nothing lost either.
    again.signal("-KILL");
    let third = Control::start(&state, None, &log);
    assert!(
        third.banner.contains("config version 2"),
        "{}",
        third.banner
    );
    assert!(third.banner.contains("start 3"), "{}", third.banner);
    assert_eq!(std::fs::read_to_string(state.join("ca.pem")).unwrap(), ca);
    assert_eq!(tokens(&state), before);
    assert_eq!(
        std::fs::read_to_string(state.join("admin-token")).unwrap(),
        admin
    );
}

#[test]
fn bad_starts_are_refused_with_exit_2_or_1() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mesh = write(dir.path(), "mesh.yaml", MESH);
    let s = state.to_str().unwrap();
    let m = mesh.to_str().unwrap();

    let o = output(&["control", "--state", s, "--listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--config"), "{}", text(&o.stderr));

    let storm = write(
        dir.path(),
        "storm.yaml",
        "defaults: { preset: istio }
services:
  frontend: { entry: { timeout: none }, calls: { checkout: {} } }
  checkout: { protocol: grpc, calls: { pricing: {} } }
  pricing: { protocol: grpc, calls: { inventory: {} } }
  inventory: { protocol: grpc }
",
    );
    let o = output(&[
        "control",
        "--state",
        s,
        "--config",
        storm.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("retry-fanout"),
        "{}",
        text(&o.stdout)
    );

    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("state.json"), "{ not json").unwrap();
    let o = output(&[
        "control",
        "--state",
        s,
        "--config",
        m,
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("state.json"),
        "{}",
        text(&o.stderr)
    );
}

/// The status, as the command line would ask for it, with what the test chooses to send.
fn status_with(addr: &str, bundle: &str, admin: Option<&str>) -> Result<String, String> {
    let server =
        hopwise_control::client::Server::new(addr, bundle.to_owned(), admin.map(str::to_owned));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(hopwise_control::client::status(&server))
        .map(|s| s.mesh)
        .map_err(|e| e.to_string())
}

#[test]
fn the_control_port_is_tls_only_and_admin_calls_need_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let log = dir.path().join("control.log");
    let mesh = write(dir.path(), "mesh.yaml", MESH);
    let s = state.to_str().unwrap();

    // Every address: no longer refused; reached on loopback.
    let mut cmd = hopwise();
    let mut control = {
        cmd.args(["control", "--state", s, "--config"]).arg(&mesh);
        let child = cmd
            .args(["--listen", "0.0.0.0:0"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut c = Control {
            child,
            addr: String::new(),
            banner: String::new(),
        };
        let mut reader = BufReader::new(c.child.stdout.take().unwrap());
        reader.read_line(&mut c.banner).unwrap();
        c
    };
    assert!(
        control
            .banner
            .starts_with("hopwise control: listening on 0.0.0.0:"),
        "{}\n{}",
        control.banner,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let port = control
        .banner
        .split("0.0.0.0:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_owned();
    control.addr = format!("127.0.0.1:{port}");
    let addr = control.addr.clone();
    let https = format!("https://{addr}");

    let o = output(&["status", "--server", &https, "--state", s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("mesh shop"), "{}", text(&o.stdout));

    // The command line says which flag is missing, and refuses plaintext URLs.
    let o = output(&["status", "--server", &addr]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--ca FILE is missing"),
        "{}",
        text(&o.stderr)
    );
    let ca = state.join("ca.pem");
    let o = output(&["status", "--server", &addr, "--ca", ca.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--admin-token FILE is missing"),
        "{}",
        text(&o.stderr)
    );
    let o = output(&[
        "status",
        "--server",
        &format!("http://{addr}"),
        "--state",
        s,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("TLS only"), "{}", text(&o.stderr));

    // A wrong admin token, from a file: UNAUTHENTICATED, said clearly.
    let wrong = write(dir.path(), "wrong-token", "hopwise-admin-00\n");
    let o = output(&[
        "status",
        "--server",
        &addr,
        "--ca",
        ca.to_str().unwrap(),
        "--admin-token",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("Unauthenticated")
            && text(&o.stderr).contains("wrong admin token"),
        "{}",
        text(&o.stderr)
    );

    // Status, Apply and RotateCa without the token, with a wrong one, with the right one.
    let bundle = std::fs::read_to_string(&ca).unwrap();
    let admin = std::fs::read_to_string(state.join("admin-token")).unwrap();
    let admin = admin.trim();
    let join = tokens(&state)["pricing"].trim().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for token in [None, Some("hopwise-admin-00"), Some(join.as_str())] {
        let e = status_with(&addr, &bundle, token).unwrap_err();
        assert!(
            e.contains("Unauthenticated") && e.contains("admin-token"),
            "{token:?}: {e}"
        );
        let server =
            hopwise_control::client::Server::new(&addr, bundle.clone(), token.map(str::to_owned));
        let e = rt
            .block_on(hopwise_control::client::apply(&server, MESH, "mesh.yaml"))
            .unwrap_err();
        assert!(e.to_string().contains("Unauthenticated"), "{token:?}: {e}");
        let e = rt
            .block_on(hopwise_control::client::rotate_ca(&server, "add", false))
            .unwrap_err();
        assert!(e.to_string().contains("Unauthenticated"), "{token:?}: {e}");
    }
    assert_eq!(status_with(&addr, &bundle, Some(admin)).unwrap(), "shop");
    let server =
        hopwise_control::client::Server::new(&addr, bundle.clone(), Some(admin.to_owned()));
    let applied = rt
        .block_on(hopwise_control::client::apply(&server, MESH, "mesh.yaml"))
        .unwrap();
    assert!(applied.applied && applied.unchanged, "{applied:?}");
    // Past the token check, to the stage's own check.
    let e = rt
        .block_on(hopwise_control::client::rotate_ca(
            &server, "sideways", false,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("bad-stage"), "{e}");

    // A client that trusts another CA does not accept the control plane's certificate.
    let other = dir.path().join("other");
    let o = output(&[
        "certs",
        "--config",
        mesh.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let foreign = std::fs::read_to_string(other.join("ca.pem")).unwrap();
    let e = status_with(&addr, &foreign, Some(admin)).unwrap_err();
    assert!(
        e.contains("cannot reach the control plane") && e.contains("certificate"),
        "{e}"
    );

    // A plaintext HTTP/2 (h2c) client gets no answer.
    let plain = rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(5))
            .connect()
            .await;
        match channel {
            Err(e) => Err(e.to_string()),
            Ok(ch) => hopwise_control::pb::control_client::ControlClient::new(ch)
                .status(hopwise_control::pb::StatusRequest {})
                .await
                .map(|_| ())
                .map_err(|s| format!("{:?}: {}", s.code(), s.message())),
        }
    });
    assert!(plain.is_err(), "a plaintext client was answered");

    // Nobody listening: a clear error, exit 2.
    assert!(control.signal("-TERM").success());
    let o = output(&["status", "--server", &addr, "--state", s]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("cannot reach the control plane"),
        "{}",
        text(&o.stderr)
    );
}

/// A build without the `etcd` feature refuses a shared store at once, saying how to get one,
/// and leaves the state directory alone.
#[cfg(not(feature = "etcd"))]
#[test]
fn without_the_etcd_feature_a_shared_store_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mesh = write(dir.path(), "mesh.yaml", MESH);
    let o = output(&[
        "control",
        "--store",
        "etcd://127.0.0.1:2379",
        "--state",
        state.to_str().unwrap(),
        "--config",
        mesh.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("no etcd support"), "{err}");
    assert!(err.contains("--features etcd"), "{err}");
    assert!(err.contains("protobuf-compiler"), "{err}");
    assert!(!state.exists(), "nothing written: {err}");
}
