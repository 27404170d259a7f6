//! The mesh's certificate authority. Its root is an ECDSA P-256 key generated on first start
//! (kept in the store) or one the operator supplies as PEM files. Proxies make their own key and
//! send a certificate signing request; the CA signs a short-lived certificate whose only subject
//! alternative name is the service's SPIFFE identity (`spiffe://<trust-domain>/service/<name>`),
//! for both TLS server and client authentication. It refuses, with an [`IssueError`] that says
//! why, a CSR that cannot be read, whose signature does not verify, or that asks for any other
//! name. The trust bundle is the list of CA certificates: the signing root, and during a
//! rotation (`hopwise control rotate-ca`) the root being introduced or the one being retired.
//!
//! Pure apart from the randomness of keys and serial numbers: the caller passes `now`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, SanType, SerialNumber,
    SubjectPublicKeyInfo,
};
use time::OffsetDateTime;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// How far in the past a certificate's `not_before` is put, so a peer whose clock is a little
/// behind still accepts it.
pub const BACKDATE: Duration = Duration::from_secs(60);
/// Default lifetime of an issued certificate.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Lifetime of a generated root.
pub const ROOT_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Why the CA could not be created or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot generate the CA: {0}")]
    Generate(rcgen::Error),
    #[error("{what}: not a PEM certificate: {reason}")]
    Certificate { what: String, reason: String },
    #[error("{what}: not a usable PEM private key: {reason}")]
    Key { what: String, reason: String },
    #[error("{what}: the certificate is not a CA (its basic constraints do not say CA:TRUE)")]
    NotCa { what: String },
    #[error("{what}: the private key does not belong to the CA certificate")]
    KeyMismatch { what: String },
    #[error("{what}: the CA certificate is not valid now (valid {not_before} to {not_after})")]
    NotValidNow {
        what: String,
        not_before: String,
        not_after: String,
    },
    #[error("randomness unavailable: {0}")]
    Random(String),
}

/// Why a certificate was not issued. Every refusal names its reason; none is a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    #[error("the join token is not one this control plane issued")]
    UnknownToken,
    #[error("the token names `{0}`, which is not a service in the mesh file in force")]
    UnknownService(String),
    #[error("the token names `{0}`, which is outside the mesh (`external`) and runs no proxy")]
    External(String),
    #[error("the CSR cannot be read: {0}")]
    Malformed(String),
    #[error("the CSR's signature does not verify with the public key it carries")]
    BadSignature,
    #[error("the CSR asks for the identity `{asked}`, but the token is for `{allowed}`")]
    WrongIdentity { asked: String, allowed: String },
    #[error(
        "the CSR asks for the {kind} `{value}`; certificates carry only the service's SPIFFE identity"
    )]
    ForbiddenName { kind: &'static str, value: String },
    #[error("the CSR asks to be a CA; proxies get leaf certificates only")]
    AsksForCa,
    #[error("the CSR's public key is of a kind the CA does not sign: {0}")]
    UnsupportedKey(String),
    #[error("the lifetime {0:?} is too short; use at least one second")]
    Lifetime(Duration),
    #[error("signing failed: {0}")]
    Sign(String),
    #[error(
        "the token is `{0}`'s, and no service of the mesh file in force runs as it (`kubernetes: \
         {{ namespace, service_account }}`)"
    )]
    NoServiceRunsAs(String),
    #[error("{0}")]
    Review(#[from] crate::review::ReviewError),
}

/// The CA certificate that signs, with its key.
struct Signer {
    cert_pem: String,
    not_after: SystemTime,
    issuer: Issuer<'static, KeyPair>,
}

/// The CA: the root that signs, and every CA certificate in the trust bundle (the signer among
/// them), in the bundle's order.
pub struct Ca {
    signer: Arc<Signer>,
    bundle: Vec<String>,
}

/// Where [`Ca::trusting`] puts another root in the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Before the signer: an old root being retired.
    Before,
    /// After the signer: a new root being introduced.
    After,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Ca")
            .field("roots", &self.bundle.len())
            .field("not_after", &self.not_after())
            .finish()
    }
}

/// A generated root, as PEM text, for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedRoot {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A signed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The leaf (PEM); intermediates would follow it.
    pub cert_chain_pem: String,
    pub trust_bundle_pem: String,
    pub not_after: SystemTime,
    pub identity: String,
}

fn offset(t: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(t)
}

fn system_time(unix: i64) -> SystemTime {
    if unix >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
    }
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// A random positive serial number of 16 bytes.
fn serial() -> Result<SerialNumber, String> {
    let bytes: [u8; 16] = crate::token::random_bytes().map_err(|e| e.to_string())?;
    let mut bytes = bytes.to_vec();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // never a leading zero byte: the encoding keeps all 16 bytes
    Ok(SerialNumber::from(bytes))
}

impl Ca {
    /// A new root: ECDSA P-256, valid from [`BACKDATE`] before `now` for [`ROOT_LIFETIME`],
    /// named `hopwise CA (<mesh>)`.
    pub fn generate(mesh_name: &str, now: SystemTime) -> Result<(Ca, GeneratedRoot), CaError> {
        Ca::generate_named(&format!("hopwise CA ({mesh_name})"), now)
    }

    /// A new root whose subject's common name is `common_name`. Roots that are trusted together
    /// during a rotation get different names (`hopwise CA (shop) #2`), so a certificate's issuer
    /// says which one signed it.
    pub fn generate_named(
        common_name: &str,
        now: SystemTime,
    ) -> Result<(Ca, GeneratedRoot), CaError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(CaError::Generate)?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "hopwise");
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + ROOT_LIFETIME);
        params.serial_number = Some(serial().map_err(CaError::Random)?);
        let cert = params.self_signed(&key).map_err(CaError::Generate)?;
        let root = GeneratedRoot {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let ca = Ca::from_pem(&root.cert_pem, &root.key_pem, "the generated CA", now)?;
        Ok((ca, root))
    }

    /// A CA from a PEM certificate and its PEM private key (PKCS #8; ECDSA, Ed25519 or RSA).
    /// `what` names where they came from, for errors (`ca.pem and ca-key.pem`).
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        what: &str,
        now: SystemTime,
    ) -> Result<Ca, CaError> {
        let cert_err = |reason: String| CaError::Certificate {
            what: what.to_owned(),
            reason,
        };
        let pem = ca_pem(cert_pem, what)?;
        let (_, x509) = x509_parser::parse_x509_certificate(&pem.contents)
            .map_err(|e| cert_err(e.to_string()))?;
        let validity = x509.validity();
        let not_before = system_time(validity.not_before.timestamp());
        let not_after = system_time(validity.not_after.timestamp());
        if now < not_before || now >= not_after {
            return Err(CaError::NotValidNow {
                what: what.to_owned(),
                not_before: validity.not_before.to_string(),
                not_after: validity.not_after.to_string(),
            });
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::Key {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
        if key.subject_public_key_info() != x509.public_key().raw {
            return Err(CaError::KeyMismatch {
                what: what.to_owned(),
            });
        }
        let issuer = Issuer::from_ca_cert_der(&pem.contents.clone().into(), key)
            .map_err(|e| cert_err(e.to_string()))?;
        // Re-encode, so the bundle holds exactly one clean PEM block per root.
        let cert_pem = pem_encode("CERTIFICATE", &pem.contents);
        Ok(Ca {
            bundle: vec![cert_pem.clone()],
            signer: Arc::new(Signer {
                cert_pem,
                not_after,
                issuer,
            }),
        })
    }

    /// This CA with another CA certificate trusted too (a root being introduced or retired
    /// during a rotation); the same root signs. `what` names the certificate for errors.
    pub fn trusting(&self, cert_pem: &str, place: Place, what: &str) -> Result<Ca, CaError> {
        let pem = ca_pem(cert_pem, what)?;
        let clean = pem_encode("CERTIFICATE", &pem.contents);
        let mut bundle = self.bundle.clone();
        if !bundle.contains(&clean) {
            match place {
                Place::Before => bundle.insert(0, clean),
                Place::After => bundle.push(clean),
            }
        }
        Ok(Ca {
            signer: self.signer.clone(),
            bundle,
        })
    }

    /// This CA trusting its signing root only (the end of a rotation).
    pub fn alone(&self) -> Ca {
        Ca {
            signer: self.signer.clone(),
            bundle: vec![self.signer.cert_pem.clone()],
        }
    }

    /// Every CA certificate proxies must trust, as one PEM text.
    pub fn trust_bundle_pem(&self) -> String {
        self.bundle.concat()
    }

    /// The CA certificates, one PEM block each, in the bundle's order.
    pub fn roots_pem(&self) -> Vec<String> {
        self.bundle.clone()
    }

    /// The signing root (PEM).
    pub fn signer_pem(&self) -> &str {
        &self.signer.cert_pem
    }

    /// The common name of each root in the bundle, in order (`hopwise CA (shop) #2`).
    pub fn root_names(&self) -> Vec<String> {
        self.bundle.iter().map(|pem| common_name(pem)).collect()
    }

    /// When the signing root expires.
    pub fn not_after(&self) -> Option<SystemTime> {
        Some(self.signer.not_after)
    }

    /// Signs a certificate for `identity` from `csr_pem`, valid from [`BACKDATE`] before `now`
    /// for `lifetime` (cut to the root's own expiry).
    pub fn issue(
        &self,
        csr_pem: &str,
        identity: &str,
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<Issued, IssueError> {
        if lifetime < Duration::from_secs(1) {
            return Err(IssueError::Lifetime(lifetime));
        }
        let root = &self.signer;
        let spki = check_csr(csr_pem, identity)?;
        let service = identity.rsplit('/').next().unwrap_or(identity);

        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, service);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let uri = identity.to_owned().try_into().map_err(|_| {
            IssueError::Sign(format!("`{identity}` cannot be put in a certificate"))
        })?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(serial().map_err(IssueError::Sign)?);
        let not_after = (now + lifetime).min(root.not_after);
        // Certificates carry whole seconds: round down so `not_after` is what the file says.
        let not_after = system_time(unix_seconds(not_after));
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(not_after);
        let cert = params
            .signed_by(&spki, &root.issuer)
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        Ok(Issued {
            cert_chain_pem: cert.pem(),
            trust_bundle_pem: self.trust_bundle_pem(),
            not_after,
            identity: identity.to_owned(),
        })
    }
}

/// One PEM CA certificate: a `CERTIFICATE` block that parses and says it is a CA.
fn ca_pem(cert_pem: &str, what: &str) -> Result<x509_parser::pem::Pem, CaError> {
    let cert_err = |reason: String| CaError::Certificate {
        what: what.to_owned(),
        reason,
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| cert_err(e.to_string()))?;
    if pem.label != "CERTIFICATE" {
        return Err(cert_err(format!(
            "the PEM block is a `{}`, not a `CERTIFICATE`",
            pem.label
        )));
    }
    let (_, x509) =
        x509_parser::parse_x509_certificate(&pem.contents).map_err(|e| cert_err(e.to_string()))?;
    if !x509.is_ca() {
        return Err(CaError::NotCa {
            what: what.to_owned(),
        });
    }
    Ok(pem)
}

/// Reads a CSR and checks that it may be signed for `identity`: it parses, its signature
/// verifies, and it asks for no name but `identity`. Returns its public key.
fn check_csr(csr_pem: &str, identity: &str) -> Result<SubjectPublicKeyInfo, IssueError> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(csr_pem.as_bytes())
        .map_err(|e| IssueError::Malformed(format!("no PEM block ({e})")))?;
    if pem.label != "CERTIFICATE REQUEST" && pem.label != "NEW CERTIFICATE REQUEST" {
        return Err(IssueError::Malformed(format!(
            "the PEM block is a `{}`, not a `CERTIFICATE REQUEST`",
            pem.label
        )));
    }
    let (rest, csr) = X509CertificationRequest::from_der(&pem.contents)
        .map_err(|e| IssueError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(IssueError::Malformed(format!(
            "{} bytes after the request",
            rest.len()
        )));
    }
    // The key first: a weak key is refused by its name, not as a signature that did not verify.
    check_key(&csr.certification_request_info.subject_pki)?;
    csr.verify_signature()
        .map_err(|_| IssueError::BadSignature)?;
    if let Some(extensions) = csr.requested_extensions() {
        for ext in extensions {
            match ext {
                ParsedExtension::SubjectAlternativeName(san) => {
                    for name in &san.general_names {
                        check_name(name, identity)?;
                    }
                }
                ParsedExtension::BasicConstraints(bc) if bc.ca => {
                    return Err(IssueError::AsksForCa);
                }
                ParsedExtension::ParseError { error } => {
                    return Err(IssueError::Malformed(format!(
                        "a requested extension: {error}"
                    )));
                }
                // Anything else it asks for (key usages, other extensions) is ignored: the
                // certificate's contents are decided here, not by the request.
                _ => {}
            }
        }
    }
    SubjectPublicKeyInfo::from_der(csr.certification_request_info.subject_pki.raw)
        .map_err(|e| IssueError::UnsupportedKey(e.to_string()))
}

/// The smallest RSA modulus signed, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// Only the keys a proxy's TLS should hold: ECDSA P-256 or P-384, Ed25519, or RSA of at least
/// [`MIN_RSA_BITS`]. Anything else (RSA-1024, DSA, other curves, Ed448) is refused naming it.
fn check_key(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Result<(), IssueError> {
    use x509_parser::oid_registry as oid;
    let alg = &spki.algorithm.algorithm;
    let refuse = |kind: String| Err(IssueError::UnsupportedKey(kind));
    if *alg == oid::OID_SIG_ED25519 {
        return Ok(());
    }
    if *alg == oid::OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        return match curve {
            Some(c) if c == oid::OID_EC_P256 || c == oid::OID_NIST_EC_P384 => Ok(()),
            Some(c) => refuse(format!(
                "ECDSA on the curve {c} (only P-256 and P-384 are signed)"
            )),
            None => refuse("ECDSA without a named curve (only P-256 and P-384 are signed)".into()),
        };
    }
    if *alg == oid::OID_PKCS1_RSAENCRYPTION {
        let bits = match spki.parsed() {
            Ok(x509_parser::public_key::PublicKey::RSA(rsa)) => modulus_bits(rsa.modulus),
            _ => 0,
        };
        return if bits >= MIN_RSA_BITS {
            Ok(())
        } else {
            refuse(format!(
                "RSA-{bits} (RSA keys need at least {MIN_RSA_BITS} bits)"
            ))
        };
    }
    let name = if *alg == oid::OID_KEY_TYPE_DSA {
        "DSA".to_owned()
    } else if *alg == oid::OID_SIG_ED448 {
        "Ed448".to_owned()
    } else {
        format!("the algorithm {alg}")
    };
    refuse(format!(
        "{name} (only ECDSA P-256/P-384, Ed25519 and RSA of {MIN_RSA_BITS} bits or more are signed)"
    ))
}

/// The length in bits of a big-endian unsigned integer (DER's leading zero bytes not counted).
fn modulus_bits(bytes: &[u8]) -> usize {
    let digits = bytes.iter().skip_while(|b| **b == 0).collect::<Vec<_>>();
    match digits.first() {
        None => 0,
        Some(first) => digits.len() * 8 - first.leading_zeros() as usize,
    }
}

fn check_name(name: &GeneralName<'_>, identity: &str) -> Result<(), IssueError> {
    let forbidden = |kind: &'static str, value: String| IssueError::ForbiddenName { kind, value };
    match name {
        GeneralName::URI(uri) if *uri == identity => Ok(()),
        GeneralName::URI(uri) => Err(IssueError::WrongIdentity {
            asked: (*uri).to_owned(),
            allowed: identity.to_owned(),
        }),
        GeneralName::DNSName(d) => Err(forbidden("DNS name", (*d).to_owned())),
        GeneralName::IPAddress(ip) => Err(forbidden("IP address", ip_text(ip))),
        GeneralName::RFC822Name(m) => Err(forbidden("e-mail address", (*m).to_owned())),
        other => Err(forbidden("name", format!("{other:?}"))),
    }
}

fn ip_text(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => {
            let mut a = [0u8; 4];
            a.copy_from_slice(bytes);
            std::net::Ipv4Addr::from(a).to_string()
        }
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(bytes);
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => format!("{bytes:02x?}"),
    }
}

/// The subject common name of the first certificate in `pem` (`?` when there is none).
pub fn common_name(pem: &str) -> String {
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(pem.as_bytes()) else {
        return "?".to_owned();
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&block.contents) else {
        return "?".to_owned();
    };
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("?")
        .to_owned()
}

/// Whether two PEM texts hold the same first certificate (whatever their line breaks).
pub fn same_certificate(a: &str, b: &str) -> bool {
    let der = |pem: &str| {
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .ok()
            .map(|(_, p)| p.contents)
    };
    match (der(a), der(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// PEM text of one DER block, 64 characters a line.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(T[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod key_tests;
