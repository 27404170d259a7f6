//! Replicas on an etcd that is locked down, as docs/control.md asks it to be — real etcd
//! processes, certificates made here with rcgen:
//!
//! - etcd with TLS and `--client-cert-auth`: a replica with `etcds://`, `--etcd-ca` and a client
//!   certificate starts and registers a proxy's copy through etcd; one without the client
//!   certificate is refused, saying so.
//! - what etcd holds: no value holds the CA's private key or a token (read raw, as anyone who can
//!   read etcd would); a second replica with the same `--store-key` serves and writes the same
//!   tokens; one with another key is refused, naming the keys; a plaintext secret is sealed by
//!   the next replica; a replica with a new key and the old one as `--store-previous-key` seals
//!   everything under the new key, after which the old key alone is refused.
//! - etcd's authentication on (turned on here through etcd-client's auth API): a replica with an
//!   etcd user (whose role covers only the prefix) and its password file serves; a wrong
//!   password, or none, is refused with the flag to look at.
//!
//! Needs the `etcd` feature and the `etcd` binary, as `control_etcd.rs`.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::etcd::{Etcd, owner_only, store_key};
use common::{Proc, backend, free, run, spawn_logged, try_spawn_logged};
use hopwise_control::store::Secret;
use hopwise_control::store::etcd::access::Tls;
use hopwise_control::store::etcd::client::{connect, etcd_client};
use hopwise_control::store::etcd::seal::StoreKey;
use hopwise_control::store::etcd::{Access, EtcdSpec};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

const MESH: &str = "mesh: { name: sec, trust_domain: sec.local }
services:
  a:
    calls:
      b: { timeout: 2s }
  b: {}
";

/// A CA, etcd's server certificate (IP SAN 127.0.0.1) and a client certificate, as PEM files.
struct Pki {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

fn pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "test etcd CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |name: &str, purpose: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![purpose];
        let cert = p.signed_by(&key, &issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        owner_only(&k);
        (c, k)
    };
    let server = leaf("server", ExtendedKeyUsagePurpose::ServerAuth);
    let client = leaf("client", ExtendedKeyUsagePurpose::ClientAuth);
    let ca_path = dir.join("etcd-ca.pem");
    std::fs::write(&ca_path, ca_cert.pem()).unwrap();
    Pki {
        ca: ca_path,
        server,
        client,
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `hopwise control` on `etcd` with the extra flags `more`: a running replica, or, when it
/// refuses to start, its exit status and output.
fn replica(dir: &Path, name: &str, url: &str, more: &[&str]) -> Result<(Proc, SocketAddr), String> {
    let listen = free();
    let state = dir.join(format!("state-{name}"));
    let mut args = vec!["control", "--store", url, "--state", p(&state)];
    let listen_text = listen.to_string();
    args.extend(["--listen", &listen_text]);
    let mesh = dir.join("mesh.yaml");
    args.extend(["--config", p(&mesh)]);
    args.extend(more);
    try_spawn_logged(&args, &dir.join(format!("control-{name}.log"))).map(|proc| (proc, listen))
}

/// `hopwise status` on a replica, with its state directory's bundle and admin token.
fn status(server: SocketAddr, state: &Path) -> String {
    let server = server.to_string();
    run(&["status", "--server", &server, "--state", p(state)])
}

/// A proxy of b in front of a backend, on `server`.
fn copy_of_b(dir: &Path, server: SocketAddr) -> Proc {
    let state = dir.join("state-a");
    let inbound = free().to_string();
    let app = backend("b").to_string();
    let control = format!("https://{server}");
    spawn_logged(
        &[
            "proxy",
            "--control",
            &control,
            "--control-ca",
            p(&state.join("ca.pem")),
            "--token-file",
            p(&state.join("tokens/b")),
            "--service",
            "b",
            "--inbound",
            &inbound,
            "--app",
            &app,
            "--cache",
            p(&dir.join("cache-b")),
        ],
        &dir.join("proxy-b.log"),
    )
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `f` on a client of the etcd at `url` (the test's own, outside any replica).
fn on_etcd<T>(
    url: &str,
    access: &Access,
    f: impl AsyncFnOnce(&mut etcd_client::Client, &EtcdSpec) -> T,
) -> T {
    let spec = EtcdSpec::parse(url).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = connect(&spec, access).await.unwrap();
        f(&mut client, &spec).await
    })
}

/// Every key and value under the prefix, read as anyone with read access to etcd would.
fn raw(url: &str, access: &Access) -> Vec<(String, String)> {
    on_etcd(url, access, async |client, spec| {
        let options = etcd_client::GetOptions::new().with_prefix();
        let resp = client
            .get(spec.layout().root(), Some(options))
            .await
            .unwrap();
        resp.kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect()
    })
}

#[test]
fn tls_with_client_certificates_and_secrets_sealed_in_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("mesh.yaml"), MESH).unwrap();
    let pki = pki(dir);
    let etcd = Etcd::with(
        dir,
        "https",
        [
            "--cert-file",
            p(&pki.server.0),
            "--key-file",
            p(&pki.server.1),
            "--trusted-ca-file",
            p(&pki.ca),
            "--client-cert-auth",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    let url = etcd.url();
    let key_1 = store_key(dir, "store-1.key", 1);
    let tls = [
        "--etcd-ca",
        p(&pki.ca),
        "--etcd-cert",
        p(&pki.client.0),
        "--etcd-key",
        p(&pki.client.1),
    ];
    fn with_key<'a>(tls: &[&'a str], key: &'a Path) -> Vec<&'a str> {
        let mut flags = tls.to_vec();
        flags.extend(["--store-key", p(key)]);
        flags
    }

    // Without the client certificate: refused, naming it.
    let refused = replica(
        dir,
        "x",
        &url,
        &["--etcd-ca", p(&pki.ca), "--store-key", p(&key_1)],
    )
    .err()
    .expect("a replica without a client certificate started");
    println!("without a client certificate: {refused}");
    assert!(refused.contains("--etcd-cert"), "{refused}");

    // With it: A starts on the empty prefix and a copy of b registers through it (an etcd lease).
    let (_a, a_addr) = replica(dir, "a", &url, &with_key(&tls, &key_1)).unwrap();
    let _b = copy_of_b(dir, a_addr);
    let state_a = dir.join("state-a");
    until("b's copy never registered through replica A", || {
        status(a_addr, &state_a).contains(" healthy ")
    });

    // What etcd holds: no private key, no token, no admin token, in any value.
    let access = Access {
        tls: Some(Tls {
            ca_pem: std::fs::read_to_string(&pki.ca).unwrap(),
            client: Some((
                std::fs::read_to_string(&pki.client.0).unwrap(),
                Secret(std::fs::read_to_string(&pki.client.1).unwrap()),
            )),
        }),
        user: None,
    };
    let kvs = raw(&url, &access);
    let secrets = [
        std::fs::read_to_string(state_a.join("tokens/a")).unwrap(),
        std::fs::read_to_string(state_a.join("tokens/b")).unwrap(),
        std::fs::read_to_string(state_a.join("admin-token")).unwrap(),
    ];
    assert!(
        kvs.iter().any(|(k, _)| k.ends_with("/secret/ca")),
        "{kvs:?}"
    );
    for (key, value) in &kvs {
        assert!(
            !value.contains("PRIVATE KEY"),
            "{key} holds a private key: {value}"
        );
        for s in &secrets {
            let hex = s.trim().rsplit('-').next().unwrap();
            assert!(!value.contains(hex), "{key} holds a token: {value}");
        }
        if key.contains("/secret/") {
            assert!(value.starts_with("hopwise-sealed:1:"), "{key}: {value}");
        }
    }

    // A second replica with the same key serves, with the same tokens.
    let (_b_replica, b_addr) = replica(dir, "b", &url, &with_key(&tls, &key_1)).unwrap();
    let state_b = dir.join("state-b");
    assert!(status(b_addr, &state_b).contains(" healthy "));
    assert_eq!(
        std::fs::read_to_string(state_b.join("tokens/b")).unwrap(),
        secrets[1]
    );

    // A secret written as it is (as by a replica before sealing) is sealed again by the next
    // replica that starts with the key.
    let token_a = format!("{}/secret/tokens/a", EtcdSpec::parse(&url).unwrap().prefix);
    on_etcd(&url, &access, async |client, _| {
        client
            .put(token_a.clone(), secrets[0].trim(), None)
            .await
            .unwrap();
    });
    let (_d, _) = replica(dir, "d", &url, &with_key(&tls, &key_1)).unwrap();
    let sealed = raw(&url, &access)
        .into_iter()
        .find(|(k, _)| *k == token_a)
        .unwrap();
    assert!(sealed.1.starts_with("hopwise-sealed:1:"), "{sealed:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("state-d/tokens/a")).unwrap(),
        secrets[0]
    );

    // One with another key is refused, naming both keys.
    let other = store_key(dir, "store-2.key", 2);
    let refused = replica(dir, "c", &url, &with_key(&tls, &other))
        .err()
        .expect("a replica with another store key started");
    println!("with another store key: {refused}");
    assert!(
        refused.contains("sealed with store key")
            && refused.contains("not with this replica's key"),
        "{refused}"
    );

    // Rotating the store key: a replica with the new key and the old one as previous seals
    // every secret again under the new key; then the new key alone serves, the old one is
    // refused.
    let mut rotating = with_key(&tls, &other);
    rotating.extend(["--store-previous-key", p(&key_1)]);
    let (_e, _) = replica(dir, "e", &url, &rotating).unwrap();
    let ids: Vec<String> = raw(&url, &access)
        .into_iter()
        .filter(|(k, _)| k.contains("/secret/"))
        .map(|(_, v)| v.split(':').nth(2).unwrap().to_owned())
        .collect();
    let new_id = StoreKey::parse(&std::fs::read(&other).unwrap()).unwrap();
    assert!(ids.len() >= 4, "{ids:?}");
    assert!(ids.iter().all(|i| i == new_id.id()), "{ids:?}");
    let (_f, f_addr) = replica(dir, "f", &url, &with_key(&tls, &other)).unwrap();
    assert!(status(f_addr, &dir.join("state-f")).contains(" healthy "));
    let refused = replica(dir, "g", &url, &with_key(&tls, &key_1))
        .err()
        .expect("a replica with the retired store key started");
    assert!(refused.contains("not with this replica's key"), "{refused}");
}

#[test]
fn etcd_users_and_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("mesh.yaml"), MESH).unwrap();
    let etcd = Etcd::new(dir);
    let url = etcd.url();
    // etcd's authentication on: root, and a user whose role covers the prefix only.
    on_etcd(&url, &Access::default(), async |c, spec| {
        c.role_add("root").await.unwrap();
        c.user_add("root", "root-password", None).await.unwrap();
        c.user_grant_role("root", "root").await.unwrap();
        c.role_add("hopwise").await.unwrap();
        let prefix = etcd_client::Permission::read_write(spec.layout().root()).with_prefix();
        c.role_grant_permission("hopwise", prefix).await.unwrap();
        c.user_add("hopwise", "s3cret", None).await.unwrap();
        c.user_grant_role("hopwise", "hopwise").await.unwrap();
        c.auth_enable().await.unwrap();
    });
    let key = store_key(dir, "store.key", 3);
    let password = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        owner_only(&path);
        path
    };
    let right = password("password", "s3cret\n");
    let wrong = password("wrong-password", "guess\n");
    let flags = |file: &Path| {
        [
            "--store-key".to_owned(),
            p(&key).to_owned(),
            "--etcd-user".to_owned(),
            "hopwise".to_owned(),
            "--etcd-password-file".to_owned(),
            p(file).to_owned(),
        ]
    };
    let (wrong, right) = (flags(&wrong), flags(&right));
    let (wrong, right) = (
        wrong.each_ref().map(String::as_str),
        right.each_ref().map(String::as_str),
    );

    let refused = replica(dir, "w", &url, &wrong)
        .err()
        .expect("a replica with a wrong password started");
    println!("with a wrong password: {refused}");
    assert!(
        refused.contains("authentication failed") && refused.contains("--etcd-password-file"),
        "{refused}"
    );
    let refused = replica(dir, "n", &url, &["--store-key", p(&key)])
        .err()
        .expect("a replica without a user started on etcd with authentication");
    println!("without a user: {refused}");
    assert!(refused.contains("--etcd-user"), "{refused}");

    let (_a, a_addr) = replica(dir, "a", &url, &right).unwrap();
    let _b = copy_of_b(dir, a_addr);
    until(
        "b's copy never registered through the authenticated replica",
        || status(a_addr, &dir.join("state-a")).contains(" healthy "),
    );
}
