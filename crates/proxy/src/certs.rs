//! `hopwise certs`: a development CA and a certificate per service carrying its SPIFFE
//! identity, written as PEM files. The control plane will replace this with issuance from CSRs;
//! the proxy reads whatever is in the files (see [`crate::tls::CertStore`]).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hopwise_model::Mesh;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

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
}

/// What `write_dev_certs` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub files: Vec<PathBuf>,
}

fn year_now() -> i32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    1970 + (secs / 31_556_952) as i32
}

fn validity(params: &mut CertificateParams) {
    // Development certificates: from the start of this year to the start of the one after next.
    let year = year_now();
    params.not_before = rcgen::date_time_ymd(year, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 2, 1, 1);
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), CertError> {
    let err = |source| CertError::Write {
        path: path.to_owned(),
        source,
    };
    std::fs::write(path, text).map_err(err)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    Ok(())
}

/// Writes `ca.pem`, `ca-key.pem` and, for every service, `<service>.pem` and
/// `<service>-key.pem` into `dir`. External services that serve TLS themselves get a
/// certificate for `localhost` / `127.0.0.1` signed by the same CA, so a local mesh can run the
/// seed's fee service.
pub fn write_dev_certs(mesh: &Mesh, dir: &Path) -> Result<Written, CertError> {
    std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let mut files = Vec::new();

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("hopwise development CA ({})", mesh.name),
    );
    ca.distinguished_name = dn;
    validity(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    for (name, text, secret) in [
        ("ca.pem", ca_cert.pem(), false),
        ("ca-key.pem", ca_key.serialize_pem(), true),
    ] {
        let path = dir.join(name);
        write(&path, &text, secret)?;
        files.push(path);
    }
    let issuer = Issuer::new(ca, ca_key);

    for service in mesh.services.values() {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, service.name.clone());
        params.distinguished_name = dn;
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
        if service.external.is_some() {
            let localhost = "localhost"
                .try_into()
                .map_err(|_| CertError::Name("localhost".into()))?;
            params.subject_alt_names.push(SanType::DnsName(localhost));
            params
                .subject_alt_names
                .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        }
        validity(&mut params);
        let cert = params.signed_by(&key, &issuer)?;
        // The chain a server presents: its certificate; the CA is in everyone's bundle.
        for (name, text, secret) in [
            (format!("{}.pem", service.name), cert.pem(), false),
            (
                format!("{}-key.pem", service.name),
                key.serialize_pem(),
                true,
            ),
        ] {
            let path = dir.join(name);
            write(&path, &text, secret)?;
            files.push(path);
        }
    }
    Ok(Written { files })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    #[test]
    fn writes_a_ca_and_spiffe_certificates() {
        let mesh = Mesh::from_yaml(
            "mesh: { trust_domain: shop.local }\nservices:\n  a: { calls: { b: {} } }\n  b: {}\n",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let written = write_dev_certs(&mesh, dir.path()).unwrap();
        assert_eq!(written.files.len(), 6);
        let cert = CertificateDer::from_pem_file(dir.path().join("a.pem")).unwrap();
        assert_eq!(
            crate::tls::spiffe_id(&cert).as_deref(),
            Some("spiffe://shop.local/service/a")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("a-key.pem"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
