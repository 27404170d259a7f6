//! A peer's certificate, as any bytes of DER: `hopwise_api::identity::peer_identity`, the one
//! reading of who a caller (or the control port) is. Never panics; an identity it returns is a
//! strict SPIFFE ID that stands in the certificate's bytes as written (an IA5String is not
//! decoded, so no escaping can make an ID the certificate does not spell out), and `spiffe_id`
//! agrees with it.
#![no_main]

use hopwise_api::identity::{peer_identity, spiffe_id};
use hopwise_api::spiffe::parse_id;
use libfuzzer_sys::fuzz_target;
use rustls_pki_types::CertificateDer;

fuzz_target!(|data: &[u8]| {
    let cert = CertificateDer::from(data);
    let id = peer_identity(&cert);
    assert_eq!(spiffe_id(&cert), id.clone().ok());
    let Ok(id) = id else {
        return;
    };
    assert!(parse_id(&id).is_ok(), "{id:?}");
    assert!(
        data.windows(id.len()).any(|w| w == id.as_bytes()),
        "{id:?} is not in the certificate"
    );
});
