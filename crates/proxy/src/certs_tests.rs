use super::*;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

const MESH: &str = "mesh: { trust_domain: shop.local }
services:
  a: { calls: { b: {}, fee: {}, far: {} } }
  b: {}
  fee: { external: { address: \"localhost:8751\", tls: { server_name: localhost } } }
  far: { external: { address: \"10.0.0.5:443\", tls: { server_name: Pay.Example } } }
";

fn der(path: &Path) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

/// (URI SANs, DNS SANs, IP SANs, serverAuth, clientAuth, not_after as Unix seconds).
type Seen = (Vec<String>, Vec<String>, Vec<String>, bool, bool, i64);

fn seen(path: &Path) -> Seen {
    let bytes = der(path);
    let (_, cert) = X509Certificate::from_der(&bytes).unwrap();
    let (mut uris, mut dns, mut ips) = (vec![], vec![], vec![]);
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::URI(u) => uris.push(u.to_string()),
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => ips.push(match b.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*b).unwrap()).to_string(),
                    _ => IpAddr::from(<[u8; 16]>::try_from(*b).unwrap()).to_string(),
                }),
                _ => {}
            }
        }
    }
    let eku = cert.extended_key_usage().unwrap();
    let (server, client) = eku.map_or((false, false), |e| {
        (e.value.server_auth, e.value.client_auth)
    });
    let end = cert.validity().not_after.timestamp();
    (uris, dns, ips, server, client, end)
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[test]
fn members_get_their_identity_and_outsiders_only_a_server_certificate() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let w = write_certs(&mesh, dir.path(), Lifetimes::default(), now).unwrap();
    assert_eq!(w.files.len(), 2 + 2 * 4);
    let day = unix(now) + 24 * 3600;
    let (uris, dns, ips, server, client, end) = seen(&dir.path().join("a.pem"));
    assert_eq!(uris, ["spiffe://shop.local/service/a"]);
    assert!(dns.is_empty() && ips.is_empty() && server && client);
    assert_eq!(end, day);
    assert_eq!(
        crate::tls::spiffe_id(&der(&dir.path().join("a.pem")).into()).as_deref(),
        Some("spiffe://shop.local/service/a")
    );

    let (uris, dns, ips, server, client, end) = seen(&dir.path().join("fee.pem"));
    assert!(uris.is_empty(), "no mesh identity: {uris:?}");
    assert_eq!(
        (dns, ips),
        (
            vec!["localhost".to_owned()],
            vec!["127.0.0.1".to_owned(), "::1".to_owned()]
        )
    );
    assert!(server && !client, "server only");
    assert_eq!(end, day);
    let (uris, dns, ips, server, client, _) = seen(&dir.path().join("far.pem"));
    assert!(uris.is_empty() && server && !client);
    assert_eq!(
        (dns, ips),
        (vec!["pay.example".to_owned()], vec!["10.0.0.5".to_owned()])
    );
    let far = w
        .files
        .iter()
        .find(|f| f.path.ends_with("far.pem"))
        .unwrap();
    assert!(
        far.what
            .contains("TLS server only, for 10.0.0.5, pay.example"),
        "{}",
        far.what
    );

    let (_, _, _, _, _, ca_end) = seen(&dir.path().join("ca.pem"));
    assert_eq!(ca_end, unix(now) + 7 * 24 * 3600);
}

#[test]
fn nothing_outlives_the_ca_and_silly_lifetimes_are_refused() {
    let mesh = Mesh::from_yaml("services:\n  a: {}\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let life = Lifetimes {
        ca: hour,
        leaf: hour,
    };
    write_certs(&mesh, dir.path(), life, now).unwrap();
    assert_eq!(seen(&dir.path().join("a.pem")).5, unix(now) + 3600);
    for (ca, leaf) in [
        (hour, 2 * hour),
        (hour, Duration::from_secs(1)),
        (Duration::ZERO, Duration::ZERO),
    ] {
        let r = write_certs(&mesh, dir.path(), Lifetimes { ca, leaf }, now);
        assert!(
            matches!(r, Err(CertError::Lifetime { .. })),
            "{ca:?} {leaf:?}: {r:?}"
        );
    }
}

#[cfg(unix)]
#[test]
fn the_ca_key_lives_apart_and_keys_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let mesh = Mesh::from_yaml("services:\n  a: {}\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // What an older `hopwise certs` left: the CA key beside the services' files, readable.
    std::fs::write(dir.path().join("ca-key.pem"), "old").unwrap();
    std::fs::write(dir.path().join("a-key.pem"), "old").unwrap();
    std::fs::set_permissions(
        dir.path().join("a-key.pem"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let w = write_dev_certs(&mesh, dir.path()).unwrap();
    assert_eq!(w.removed, Some(dir.path().join("ca-key.pem")));
    assert!(!dir.path().join("ca-key.pem").exists());
    assert_eq!(w.ca_dir, dir.path().join("ca"));
    assert_eq!(mode(&w.ca_dir), 0o700);
    let listed: Vec<_> = std::fs::read_dir(&w.ca_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["ca-key.pem"], "nothing a service needs is in ca/");
    for key in [ca_key_path(dir.path()), dir.path().join("a-key.pem")] {
        assert_eq!(mode(&key), 0o600, "{}", key.display());
    }
    assert_eq!(mode(&dir.path().join("a.pem")) & 0o600, 0o600);
}
