//! A TokenReview's status as the API server answers it, read by `hopwise_kube::identity::
//! read_status` (what the control plane vouches for a pod's token by): any bytes, the first line
//! the audience asked for, the rest the status as JSON (what does not decode is skipped, as
//! kube's client would fail it). Never a panic, and it reads exactly what it promises:
//! - accepted only when authenticated, the audience among those granted, and the username
//!   `system:serviceaccount:<namespace>:<name>` with both parts non-empty and no `:` in either —
//!   the two printed back into a username give the username sent, so nothing is cut or made up;
//! - the pod is the first `authentication.kubernetes.io/pod-name` the user's extra names;
//! - every refusal is `Refused` (the server answered), never `Unavailable`;
//! - a namespace and name Kubernetes' own rules admit make an identity that is a SPIFFE ID.
#![no_main]

use hopwise_api::spiffe::parse_id;
use hopwise_kube::identity::{TokenError, read_status};
use hopwise_model::kubernetes::{ServiceAccount, check_namespace, check_service_account};
use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (audience, json) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let Ok(audience) = std::str::from_utf8(audience) else {
        return;
    };
    let Ok(status) = serde_json::from_slice::<TokenReviewStatus>(json) else {
        return;
    };
    let username = status.user.as_ref().and_then(|u| u.username.as_deref());
    let should = status.authenticated == Some(true)
        && status
            .audiences
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| a == audience))
        && username.is_some_and(|u| {
            u.strip_prefix("system:serviceaccount:")
                .is_some_and(|rest| {
                    rest.matches(':').count() == 1 && !rest.starts_with(':') && !rest.ends_with(':')
                })
        });
    match read_status(&status, audience) {
        Ok(t) => {
            assert!(should, "accepted {status:?}");
            assert!(!t.namespace.is_empty() && !t.service_account.is_empty());
            assert!(!t.namespace.contains(':') && !t.service_account.contains(':'));
            let printed = format!(
                "system:serviceaccount:{}:{}",
                t.namespace, t.service_account
            );
            assert_eq!(Some(printed.as_str()), username);
            let pod = status
                .user
                .as_ref()
                .and_then(|u| u.extra.as_ref())
                .and_then(|x| x.get("authentication.kubernetes.io/pod-name"))
                .and_then(|names| names.first());
            assert_eq!(t.pod.as_ref(), pod);
            if check_namespace(&t.namespace).is_ok()
                && check_service_account(&t.service_account).is_ok()
            {
                let sa = ServiceAccount {
                    namespace: t.namespace,
                    name: t.service_account,
                };
                let id = sa.identity("shop.local");
                assert!(parse_id(&id).is_ok(), "{id} is not a SPIFFE ID");
            }
        }
        Err(TokenError::Refused(why)) => {
            assert!(!should, "refused {status:?}: {why}");
            assert!(!why.is_empty());
        }
        Err(e @ TokenError::Unavailable(_)) => panic!("an answer read as unavailable: {e}"),
    }
});
