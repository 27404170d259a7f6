#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use rustls_pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;

use super::*;

/// With every handshake slot held by clients that never send a byte, a real client's
/// handshake cannot finish; as soon as one of them goes, it does.
#[tokio::test]
async fn handshakes_wait_for_a_free_slot() {
    let now = SystemTime::now();
    let (ca, _) = Ca::generate("t", now).unwrap();
    let bundle = ca.trust_bundle_pem();
    let ca = Arc::new(ca);
    let life = Duration::from_secs(3600);
    let tls = ServerTls::new(ca, "spiffe://t/control".into(), life, now).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut accepted = incoming_with(listener, tls, 2, crate::conn::Limits::default());

    let silent = TcpStream::connect(addr).await.unwrap();
    let _silent_too = TcpStream::connect(addr).await.unwrap();
    let config = crate::client::connect::client_config(&bundle).unwrap();
    let mut client = tokio::spawn(async move {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("hopwise-control").unwrap();
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
    });
    // It cannot finish while both slots are held: nobody on the server reads its hello.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut client)
            .await
            .is_err(),
        "a handshake finished with no free slot"
    );
    drop(silent);
    let done = tokio::time::timeout(Duration::from_secs(10), client).await;
    assert!(matches!(done, Ok(Ok(Ok(_)))), "{done:?}");
    let served = tokio::time::timeout(Duration::from_secs(10), accepted.next()).await;
    assert!(matches!(served, Ok(Some(Ok(_)))));
}
