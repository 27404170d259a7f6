//! The Kubernetes subcommands of the binary, as a pod and a user run them: `hopwise
//! capture-init` loaded in a network namespace of its own (what the injected `hopwise-init`
//! container does in a pod's) — an app's connection is redirected to the capture port with its
//! original destination intact, the proxy's uid goes straight out —, and `hopwise install`'s
//! output. Needs root, util-linux's `unshare`, `ip`, `nft` and Debian's `/usr/bin/python3` (the
//! connecting programs run as other uids, which cannot read a python under /root). The
//! manifests applied to a real API server: crates/kube/tests/install.rs.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

const HOPWISE: &str = env!("CARGO_BIN_EXE_hopwise");

/// Run as root inside the namespace after the rules are loaded: listens on the capture port,
/// connects to an address outside as an app's uid and as the proxy's, and says what happened.
const PROBE: &str = r#"
import socket, struct, subprocess
listener = socket.socket()
listener.bind(("127.0.0.1", 4140))
listener.listen(8)
listener.settimeout(5)
CONNECT = """
import socket
s = socket.socket(); s.settimeout(1)
try:
    s.connect(("10.9.9.9", 80)); print("connected")
except Exception as e:
    print("not connected: %s" % e)
"""
def attempt(uid):
    out = subprocess.run(["/usr/bin/python3", "-c", CONNECT], user=uid, capture_output=True, text=True)
    return out.stdout.strip()
print("app:", attempt(1000))
conn, _ = listener.accept()
port, ip = struct.unpack("!2xH4s8x", conn.getsockopt(socket.SOL_IP, 80, 16))  # SO_ORIGINAL_DST
print("original destination:", socket.inet_ntoa(ip), port)
print("proxy:", attempt(2140))
"#;

#[test]
fn capture_init_sends_the_app_to_the_proxy_and_lets_the_proxy_out() {
    // A namespace of its own with a route out (a veth pair going nowhere): without the rules an
    // app's connection to 10.9.9.9 would time out, as the proxy's does.
    let setup = format!(
        "ip link set lo up && ip link add v0 type veth peer name v1 && \
         ip addr add 10.0.0.1/8 dev v0 && ip link set v0 up && ip link set v1 up && \
         {HOPWISE} capture-init --proxy-uid 2140 && /usr/bin/python3 -c \"$1\""
    );
    let out = Command::new("unshare")
        .args(["--net", "sh", "-c", &setup, "sh", PROBE])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "app: connected", "{text}{err}");
    assert_eq!(lines[1], "original destination: 10.9.9.9 80", "{text}");
    assert!(lines[2].starts_with("proxy: not connected"), "{text}");
}

#[test]
fn install_prints_every_object_with_the_image_named() {
    let out = Command::new(HOPWISE)
        .args(["install", "--image", "registry.example/hopwise:1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Secret",
            "PersistentVolumeClaim",
            "Deployment",
            "Service",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration"
        ]
    );
    let deployment = &list["items"][7];
    let containers = &deployment["spec"]["template"]["spec"]["containers"];
    for c in containers.as_array().unwrap() {
        assert_eq!(c["image"], "registry.example/hopwise:1");
    }
    // The webhook injects the same image.
    let args = containers[1]["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--image").unwrap();
    assert_eq!(args[at + 1], "registry.example/hopwise:1");
}

#[test]
fn install_mesh_prints_the_mesh_resource_of_a_file_check_takes_and_refuses_one_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (good, bad) = (dir.path().join("good.yaml"), dir.path().join("bad.yaml"));
    std::fs::write(
        &good,
        "mesh: { trust_domain: shop.local }\nservices:\n  web: { calls: { api: {} } }\n  api:\n",
    )
    .unwrap();
    std::fs::write(
        &bad,
        "services:\n  web: { entry: { timeout: 1s }, calls: { api: { timeout: 5s } } }\n  api: {}\n",
    )
    .unwrap();
    let run = |file: &std::path::Path| {
        Command::new(HOPWISE)
            .args(["install", "--mesh"])
            .arg(file)
            .output()
            .unwrap()
    };
    let out = run(&good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mesh: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(mesh["apiVersion"], "hopwise.dev/v1alpha1");
    assert_eq!(mesh["kind"], "Mesh");
    assert_eq!(mesh["metadata"]["name"], "default");
    assert_eq!(mesh["spec"]["mesh"]["trust_domain"], "shop.local");
    // `api:` with nothing, as the file wrote it: the reader's empty mapping.
    assert!(mesh["spec"]["services"]["api"].is_null(), "{mesh}");
    let out = run(&bad);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is refused") && err.contains("exceeds-client"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
