#![allow(clippy::unwrap_used)]

use http_body_util::BodyExt;
use tonic::Code;

use super::*;

/// A whole snapshot as large as a big mesh's first one, then a small delta.
fn snapshots() -> (pb::Snapshot, pb::Snapshot) {
    let whole = pb::Snapshot {
        version: 7,
        config_version: 3,
        service: "svc-001".into(),
        identity: "spiffe://shop.local/svc-001".into(),
        mesh_yaml: Some("services: {}\n".repeat(6_000)),
        policy_json: Some("{}".into()),
        upstreams: vec![pb::Upstream {
            service: "shared".into(),
            identity: "spiffe://shop.local/shared".into(),
            endpoints: vec!["10.0.0.1:8080".into(), "10.0.0.2:8080".into()],
            removed_endpoints: Vec::new(),
            labelled: Vec::new(),
        }],
        ..Default::default()
    };
    let delta = pb::Snapshot {
        version: 8,
        upstreams: vec![pb::Upstream {
            service: "shared".into(),
            endpoints: vec!["10.0.0.3:8080".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    (whole, delta)
}

#[test]
fn a_frame_is_the_grpc_prefix_and_the_protobuf_bytes_at_their_exact_size() {
    let (whole, delta) = snapshots();
    for message in [whole, delta] {
        let bytes = frame(&message).unwrap();
        let body = message.encode_to_vec();
        assert_eq!(bytes.len(), 5 + body.len());
        assert_eq!(bytes[0], 0, "not compressed");
        assert_eq!(
            &bytes[1..5],
            &u32::try_from(body.len()).unwrap().to_be_bytes()
        );
        assert_eq!(&bytes[5..], &body[..]);
    }
}

/// The body's frames, read by tonic's own client-side decoder (what the generated client
/// runs), give back the messages sent and the status that ended the stream.
#[tokio::test]
async fn tonics_decoder_reads_the_messages_and_the_status_sent() {
    let (whole, delta) = snapshots();
    let (tx, rx) = mpsc::channel(4);
    tx.send(Ok(whole.clone())).await.unwrap();
    tx.send(Ok(delta.clone())).await.unwrap();
    tx.send(Err(Status::permission_denied(
        "the token changed: subscribe again",
    )))
    .await
    .unwrap();
    drop(tx);
    let body = Messages {
        messages: rx,
        ended: false,
    };
    let mut codec = tonic_prost::ProstCodec::<pb::SubscribeRequest, pb::Snapshot>::default();
    let mut stream = Streaming::<pb::Snapshot>::new_response(
        codec.decoder(),
        body,
        http::StatusCode::OK,
        None,
        None,
    );
    assert_eq!(stream.message().await.unwrap(), Some(whole));
    assert_eq!(stream.message().await.unwrap(), Some(delta));
    let end = stream.message().await.unwrap_err();
    assert_eq!(end.code(), Code::PermissionDenied);
    assert_eq!(end.message(), "the token changed: subscribe again");
}

/// A stream that ends without an error ends with `grpc-status: 0`, and then nothing.
#[tokio::test]
async fn a_stream_that_ends_sends_an_ok_status_and_ends() {
    let (tx, rx) = mpsc::channel(1);
    drop(tx);
    let mut body = Messages {
        messages: rx,
        ended: false,
    };
    let frame = body.frame().await.unwrap().unwrap();
    let trailers = frame.into_trailers().unwrap();
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert!(body.is_end_stream());
    assert!(body.frame().await.is_none());
}
