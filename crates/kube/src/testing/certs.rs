//! The certificates a test API server needs, made fresh for each one (rcgen, ECDSA P-256, rcgen's
//! default validity: they go with the temporary directory) and written there as PEM: a throwaway
//! CA, the API server's serving certificate for 127.0.0.1 (`apiserver.crt`/`.key` in
//! `--cert-dir`, the names kube-apiserver looks for), the tests' client certificate (user
//! `default` in group `system:masters`, as envtest's), and the ServiceAccount signing key.
//! Writes files; starts nothing.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::Error;

/// Where the files are, and the CA's certificate as DER for a client's roots.
#[derive(Debug)]
pub(super) struct Certs {
    pub ca: PathBuf,
    pub ca_der: Vec<u8>,
    /// Holds `apiserver.crt` and `apiserver.key`.
    pub cert_dir: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The ServiceAccount tokens' signing key (PKCS#8) and its public key, which verifies
    /// them (kube-apiserver reads no public key out of a PKCS#8 private key file).
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// The subject of the tests' client certificate: a user in a group RBAC lets do anything.
const CLIENT_USER: &str = "default";
const CLIENT_GROUP: &str = "system:masters";

/// Makes every certificate and key and writes them under `dir`.
pub(super) fn write(dir: &Path) -> Result<Certs, Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "hopwise-test-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["localhost".to_owned()])?;
    server
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    server
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let client_key = KeyPair::generate()?;
    let mut client = CertificateParams::default();
    client
        .distinguished_name
        .push(DnType::CommonName, CLIENT_USER);
    client
        .distinguished_name
        .push(DnType::OrganizationName, CLIENT_GROUP);
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &issuer)?;

    let service_account = KeyPair::generate()?;

    let cert_dir = dir.join("certs");
    std::fs::create_dir(&cert_dir).map_err(|e| Error::io("creating the cert dir", e))?;
    let certs = Certs {
        ca: dir.join("ca.crt"),
        ca_der: ca_cert.der().to_vec(),
        cert_dir,
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
        service_account_key: dir.join("sa.key"),
        service_account_pub: dir.join("sa.pub"),
    };
    let files = [
        (certs.ca.clone(), ca_cert.pem()),
        (certs.cert_dir.join("apiserver.crt"), server_cert.pem()),
        (
            certs.cert_dir.join("apiserver.key"),
            server_key.serialize_pem(),
        ),
        (certs.client_cert.clone(), client_cert.pem()),
        (certs.client_key.clone(), client_key.serialize_pem()),
        (
            certs.service_account_key.clone(),
            service_account.serialize_pem(),
        ),
        (
            certs.service_account_pub.clone(),
            service_account.public_key_pem(),
        ),
    ];
    for (path, pem) in files {
        std::fs::write(&path, pem)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    Ok(certs)
}
