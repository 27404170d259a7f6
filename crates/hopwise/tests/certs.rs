//! `hopwise certs`, the real binary on the library example: what each certificate it writes
//! may do (read back with x509-parser: extended key usage, names, validity), where the CA's key
//! goes and with which permissions, and what it prints.

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

use std::net::IpAddr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

const LIBRARY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/library/mesh.yaml"
);

fn certs(out: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hopwise"));
    cmd.timeout(Duration::from_secs(60));
    cmd.args(["certs", "--config", LIBRARY, "--out"])
        .arg(out)
        .args(extra);
    cmd.output().unwrap()
}

/// What a certificate file says.
#[derive(Debug, Default)]
struct Cert {
    uris: Vec<String>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    server_auth: bool,
    client_auth: bool,
    ca: bool,
    /// not_after − not_before, in seconds.
    lifetime: i64,
}

fn read(path: &Path) -> Cert {
    let der = CertificateDer::from_pem_file(path).unwrap();
    let (_, x) = X509Certificate::from_der(&der).unwrap();
    let mut c = Cert {
        ca: x.is_ca(),
        lifetime: x.validity().not_after.timestamp() - x.validity().not_before.timestamp(),
        ..Cert::default()
    };
    if let Some(eku) = x.extended_key_usage().unwrap() {
        c.server_auth = eku.value.server_auth;
        c.client_auth = eku.value.client_auth;
    }
    for n in x
        .subject_alternative_name()
        .unwrap()
        .iter()
        .flat_map(|s| &s.value.general_names)
    {
        match n {
            GeneralName::URI(u) => c.uris.push(u.to_string()),
            GeneralName::DNSName(d) => c.dns.push(d.to_string()),
            GeneralName::IPAddress(b) if b.len() == 4 => {
                c.ips.push(<[u8; 4]>::try_from(*b).unwrap().into());
            }
            GeneralName::IPAddress(b) => c.ips.push(<[u8; 16]>::try_from(*b).unwrap().into()),
            _ => {}
        }
    }
    c
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Five minutes of back-dating for a peer whose clock is a little behind.
const BACKDATE: i64 = 300;

#[test]
fn the_fee_gets_a_server_certificate_and_the_ca_key_is_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = certs(&out, &[]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // loan, in the mesh: its SPIFFE identity, client and server, a day.
    let loan = read(&out.join("loan.pem"));
    assert_eq!(loan.uris, ["spiffe://library.local/service/loan"]);
    assert!(loan.server_auth && loan.client_auth && !loan.ca);
    assert_eq!(loan.lifetime, 24 * 3600 + BACKDATE);
    // fee, outside it: a TLS server for its address, no mesh identity, no client use.
    let fee = read(&out.join("fee.pem"));
    assert!(fee.uris.is_empty(), "no spiffe:// name: {fee:?}");
    assert!(fee.server_auth && !fee.client_auth && !fee.ca, "{fee:?}");
    assert_eq!(fee.dns, ["localhost"]);
    assert_eq!(
        fee.ips,
        [
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "::1".parse().unwrap()
        ]
    );
    assert_eq!(fee.lifetime, 24 * 3600 + BACKDATE);
    // The CA: a week.
    let ca = read(&out.join("ca.pem"));
    assert!(ca.ca);
    assert_eq!(ca.lifetime, 7 * 24 * 3600 + BACKDATE);

    // The CA's key alone in its own directory; nothing else secret beside the services' files.
    assert!(!out.join("ca-key.pem").exists());
    let in_ca: Vec<_> = std::fs::read_dir(out.join("ca"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(in_ca, ["ca-key.pem"]);
    #[cfg(unix)]
    {
        assert_eq!(mode(&out.join("ca")), 0o700);
        for key in ["ca/ca-key.pem", "loan-key.pem", "fee-key.pem"] {
            assert_eq!(mode(&out.join(key)), 0o600, "{key}");
        }
    }

    // Every file is printed with its validity or mode, and where the CA key went.
    for (file, said) in [
        ("ca.pem", "valid until"),
        ("ca/ca-key.pem", "mode 0600"),
        ("loan.pem", "valid until"),
        ("fee.pem", "TLS server only"),
        ("fee-key.pem", "mode 0600"),
    ] {
        let shown = out.join(file).display().to_string();
        assert!(
            text.lines()
                .any(|l| l.starts_with(&shown) && l.contains(said)),
            "no line for {file} saying {said:?}:\n{text}"
        );
    }
    assert!(
        text.contains("certificates last 24h, the CA 168h"),
        "{text}"
    );
}

#[test]
fn lifetimes_are_chosen_on_the_command_line_and_never_outlive_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = certs(&out, &["--validity", "2h", "--ca-validity", "48h"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(&out.join("fee.pem")).lifetime, 2 * 3600 + BACKDATE);
    assert_eq!(read(&out.join("ca.pem")).lifetime, 48 * 3600 + BACKDATE);

    let o = certs(&out, &["--validity", "200h"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("cannot outlive its CA"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
