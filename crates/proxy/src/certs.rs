//! `hopwise certs`: a development CA and the certificates of a mesh, written as PEM files.
//!
//! - Every service in the mesh gets `<service>.pem` with its SPIFFE identity (the URI SAN
//!   `spiffe://<trust-domain>/service/<name>`), for TLS client and server, and its key.
//! - A service outside the mesh (`external:`) gets a **server-only** certificate: extended key
//!   usage serverAuth alone, and only the DNS/IP names of its `address` and `tls.server_name`
//!   — no SPIFFE identity. It can serve the TLS the mesh's proxies verify when they call it,
//!   and cannot pass an inbound proxy's client check (rustls' `WebPkiClientVerifier` requires
//!   clientAuth) nor claim to be a mesh member.
//! - The CA's key goes to `ca/ca-key.pem`, in its own directory (mode 0700, the key 0600),
//!   apart from the files services are given; nothing a service needs is in `ca/`. The CA
//!   certificate every proxy trusts stays `ca.pem` beside the services' files.
//! - Lifetimes are short ([`Lifetimes`]: a day for a certificate, a week for the CA) and
//!   nothing outlives the CA.
//!
//! The control plane issues proxies' certificates from CSRs instead; the proxy reads whatever
//! is in the files (see [`crate::tls::CertStore`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hopwise_model::{Dur, Mesh, Service};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{0}` cannot be put in a certificate")]
    Name(String),
    #[error(
        "a certificate valid for {} cannot outlive its CA (valid for {}), and neither can last under a minute",
        Dur(*leaf), Dur(*ca)
    )]
    Lifetime { leaf: Duration, ca: Duration },
}

/// How long what [`write_certs`] issues is valid, from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// The development CA (default: 7 days).
    pub ca: Duration,
    /// Each service's certificate (default: 24 hours); never past the CA's end.
    pub leaf: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            ca: Duration::from_secs(7 * 24 * 3600),
            leaf: Duration::from_secs(24 * 3600),
        }
    }
}

/// How far in the past `not_before` is put, for a peer whose clock is a little behind.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// The directory, under the output directory, that holds the CA's key alone.
pub const CA_DIR: &str = "ca";

/// Where [`write_certs`] puts the CA's private key, for `dir` (`hopwise control --ca-key`).
pub fn ca_key_path(dir: &Path) -> PathBuf {
    dir.join(CA_DIR).join("ca-key.pem")
}

/// One file written, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub path: PathBuf,
    /// What it holds, for people (`spiffe://…/service/a, client and server`).
    pub what: String,
    /// A certificate's end of validity; `None` for a key.
    pub not_after: Option<SystemTime>,
    /// The permissions it was given, when not the default (`0o600` for a key).
    pub mode: Option<u32>,
}

/// What [`write_certs`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub files: Vec<WrittenFile>,
    /// The CA key's directory ([`CA_DIR`], mode 0700).
    pub ca_dir: PathBuf,
    /// A CA key of the older layout (`<dir>/ca-key.pem`, beside the services' files) that was
    /// removed: it belonged to a CA this run replaced.
    pub removed: Option<PathBuf>,
}

/// [`write_certs`] with the default lifetimes, from now.
pub fn write_dev_certs(mesh: &Mesh, dir: &Path) -> Result<Written, CertError> {
    write_certs(mesh, dir, Lifetimes::default(), SystemTime::now())
}

/// Writes `ca.pem`, `ca/ca-key.pem` and, for every service, `<service>.pem` and
/// `<service>-key.pem` into `dir`, valid from `now` for `life`.
pub fn write_certs(
    mesh: &Mesh,
    dir: &Path,
    life: Lifetimes,
    now: SystemTime,
) -> Result<Written, CertError> {
    let minute = Duration::from_secs(60);
    if life.leaf > life.ca || life.leaf < minute || life.ca < minute {
        return Err(CertError::Lifetime {
            leaf: life.leaf,
            ca: life.ca,
        });
    }
    let ca_dir = dir.join(CA_DIR);
    for (d, mode) in [(dir, None), (ca_dir.as_path(), Some(0o700))] {
        std::fs::create_dir_all(d).map_err(write_err(d))?;
        if let Some(mode) = mode {
            set_mode(d, mode).map_err(write_err(d))?;
        }
    }
    let ca_end = whole_seconds(now + life.ca);
    let leaf_end = whole_seconds(now + life.leaf).min(ca_end);
    let mut files = Vec::new();

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.distinguished_name = common_name(format!("hopwise development CA ({})", mesh.name));
    valid(&mut ca, now, ca_end);
    let ca_cert = ca.self_signed(&ca_key)?;
    let what = "the mesh's CA certificate: every proxy's trust bundle";
    files.push(put(dir.join("ca.pem"), &ca_cert.pem(), what, Some(ca_end))?);
    let what =
        "the CA's private key: only `hopwise control --ca-key` needs it; give it to no service";
    files.push(put(ca_key_path(dir), &ca_key.serialize_pem(), what, None)?);
    let issuer = Issuer::new(ca, ca_key);

    for service in mesh.services.values() {
        let key = KeyPair::generate()?;
        let (mut params, what) = match &service.external {
            None => mesh_member(mesh, service)?,
            Some(_) => outside(service)?,
        };
        valid(&mut params, now, leaf_end);
        let cert = params.signed_by(&key, &issuer)?;
        // The chain a server presents: its certificate; the CA is in everyone's bundle.
        let name = &service.name;
        files.push(put(
            dir.join(format!("{name}.pem")),
            &cert.pem(),
            &what,
            Some(leaf_end),
        )?);
        let what = format!("{name}'s private key");
        files.push(put(
            dir.join(format!("{name}-key.pem")),
            &key.serialize_pem(),
            &what,
            None,
        )?);
    }

    let old = dir.join("ca-key.pem");
    let removed = match std::fs::remove_file(&old) {
        Ok(()) => Some(old),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(write_err(&old)(e)),
    };
    Ok(Written {
        files,
        ca_dir,
        removed,
    })
}

/// A mesh member: its SPIFFE identity, for mTLS both ways.
fn mesh_member(mesh: &Mesh, service: &Service) -> Result<(CertificateParams, String), CertError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name(service.name.clone());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let id = mesh.identity(&service.name);
    let uri = id
        .clone()
        .try_into()
        .map_err(|_| CertError::Name(id.clone()))?;
    params.subject_alt_names = vec![SanType::URI(uri)];
    Ok((params, format!("{id}, TLS client and server")))
}

/// A service outside the mesh: a TLS server under its own names, and nothing more.
fn outside(service: &Service) -> Result<(CertificateParams, String), CertError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name(service.name.clone());
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let names = server_names(service);
    let mut shown = Vec::new();
    for n in &names {
        params.subject_alt_names.push(match n.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => {
                let dns = n
                    .clone()
                    .try_into()
                    .map_err(|_| CertError::Name(n.clone()))?;
                SanType::DnsName(dns)
            }
        });
        shown.push(n.as_str());
    }
    let what = format!(
        "{}, outside the mesh: TLS server only, for {}; no mesh identity",
        service.name,
        shown.join(", ")
    );
    Ok((params, what))
}

/// The names a client may reach an external service by: its address's host and
/// `tls.server_name`; `localhost` brings the loopback addresses it resolves to.
fn server_names(service: &Service) -> Vec<String> {
    let Some(e) = &service.external else {
        return Vec::new();
    };
    let host = e
        .address
        .rsplit_once(':')
        .map_or(e.address.as_str(), |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let server_name = e.tls.as_ref().map(|t| t.server_name.as_str());
    let mut names: Vec<String> = Vec::new();
    for n in [Some(host), server_name].into_iter().flatten() {
        let n = n.to_ascii_lowercase();
        let also: &[&str] = if n == "localhost" {
            &["127.0.0.1", "::1"]
        } else {
            &[]
        };
        for n in std::iter::once(n.as_str()).chain(also.iter().copied()) {
            if !n.is_empty() && !names.iter().any(|m| m == n) {
                names.push(n.to_owned());
            }
        }
    }
    names
}

fn common_name(name: String) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

fn valid(params: &mut CertificateParams, now: SystemTime, not_after: SystemTime) {
    params.not_before = OffsetDateTime::from(now - BACKDATE);
    params.not_after = OffsetDateTime::from(not_after);
}

/// `t` rounded down to a whole second: what the certificate will say.
fn whole_seconds(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs())
}

/// `t` as `2026-12-01 10:30 UTC`.
pub fn utc(t: SystemTime) -> String {
    let d = OffsetDateTime::from(t);
    format!("{} {:02}:{:02} UTC", d.date(), d.hour(), d.minute())
}

fn write_err(path: &Path) -> impl Fn(std::io::Error) -> CertError + '_ {
    move |source| CertError::Write {
        path: path.to_owned(),
        source,
    }
}

/// Writes `text` to `path`: a certificate as it is, a key (`not_after` `None`) created 0600
/// before a byte of it is written.
fn put(
    path: PathBuf,
    text: &str,
    what: &str,
    not_after: Option<SystemTime>,
) -> Result<WrittenFile, CertError> {
    use std::io::Write;
    let secret = not_after.is_none();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&path).map_err(write_err(&path))?;
    if secret {
        // An older file keeps its mode through `open`: narrow it before writing the key.
        set_mode(&path, 0o600).map_err(write_err(&path))?;
    }
    file.write_all(text.as_bytes()).map_err(write_err(&path))?;
    Ok(WrittenFile {
        path,
        what: what.to_owned(),
        not_after,
        mode: secret.then_some(0o600),
    })
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: u32) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
#[path = "certs_tests.rs"]
mod tests;
