use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

use super::*;

fn status(user: &str, audiences: &[&str], pod: Option<&str>) -> TokenReviewStatus {
    TokenReviewStatus {
        authenticated: Some(true),
        audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
        user: Some(UserInfo {
            username: Some(user.to_owned()),
            extra: pod.map(|p| BTreeMap::from([(POD_NAME.to_owned(), vec![p.to_owned()])])),
            ..Default::default()
        }),
        error: None,
    }
}

#[test]
fn a_service_accounts_bound_token_names_its_namespace_account_and_pod() {
    let s = status(
        "system:serviceaccount:shop:web",
        &["hopwise"],
        Some("web-7d9f"),
    );
    assert_eq!(
        read_status(&s, "hopwise"),
        Ok(ServiceAccountToken {
            namespace: "shop".into(),
            service_account: "web".into(),
            pod: Some("web-7d9f".into()),
        })
    );
}

#[test]
fn anything_but_an_authenticated_service_account_of_the_audience_is_refused() {
    let refused = |s: &TokenReviewStatus| match read_status(s, "hopwise") {
        Err(TokenError::Refused(why)) => why,
        other => panic!("{other:?}"),
    };
    let mut not = status("system:serviceaccount:shop:web", &["hopwise"], None);
    not.authenticated = Some(false);
    not.error = Some("token has been invalidated".into());
    assert!(refused(&not).contains("token has been invalidated"));
    not.authenticated = None;
    refused(&not);
    assert!(
        refused(&status("system:serviceaccount:shop:web", &["api"], None))
            .contains("audience `hopwise`")
    );
    let mut no_audiences = status("system:serviceaccount:shop:web", &[], None);
    no_audiences.audiences = None;
    refused(&no_audiences);
    for user in [
        "alice",
        "system:serviceaccount:",
        "system:serviceaccount:shop",
        "system:serviceaccount::web",
        "system:serviceaccount:shop:",
        "system:serviceaccount:shop:web:extra",
        "system:node:worker-1",
    ] {
        assert!(
            refused(&status(user, &["hopwise"], None)).contains("is not a ServiceAccount"),
            "{user}"
        );
    }
}
