//! A pod's identity from its projected ServiceAccount token, as the API server says it is: a
//! `TokenReview` for the audience the injected volume asks for ([`TOKEN_AUDIENCE`]). The answer
//! is read strictly ([`read_status`], pure): authenticated, the audience granted, a
//! ServiceAccount's username (`system:serviceaccount:<namespace>:<name>`), and the pod a bound
//! token names. Nothing of the token itself is trusted: a token another audience's, expired,
//! of a deleted pod or of a deleted ServiceAccount is refused by the API server, and the control
//! plane signs only what the review says.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::api::{Api, PostParams};

pub use crate::inject::TOKEN_AUDIENCE;

/// The prefix of a ServiceAccount's username in a review.
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:";
/// The extra field a bound token's review names its pod in.
const POD_NAME: &str = "authentication.kubernetes.io/pod-name";

/// Who a token belongs to, as the API server reviewed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    pub namespace: String,
    pub service_account: String,
    /// The pod the token is bound to, if it is (projected tokens are).
    pub pod: Option<String>,
}

/// Why a token was not vouched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The API server reviewed it and said no, or said something that is not a ServiceAccount
    /// of the audience.
    #[error("{0}")]
    Refused(String),
    /// The API server could not be asked (down, or it refused the control plane's own request —
    /// its RBAC needs `tokenreviews` `create`).
    #[error("{0}")]
    Unavailable(String),
}

/// Reviews tokens for `audience` with the API server `config` reaches. The client is made on
/// the first review, inside the runtime that serves (kube's client needs one to run in).
pub struct TokenReviews {
    config: kube::Config,
    client: tokio::sync::OnceCell<kube::Client>,
    audience: String,
}

impl std::fmt::Debug for TokenReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviews")
            .field("server", &self.config.cluster_url)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl TokenReviews {
    /// Reviews for [`TOKEN_AUDIENCE`].
    pub fn new(config: kube::Config) -> TokenReviews {
        TokenReviews::for_audience(config, TOKEN_AUDIENCE)
    }

    /// Reviews for [`TOKEN_AUDIENCE`] with kube's usual configuration: a pod's own
    /// ServiceAccount, else `$KUBECONFIG` or `~/.kube/config`.
    pub async fn infer() -> Result<TokenReviews, TokenError> {
        kube::Config::infer()
            .await
            .map(TokenReviews::new)
            .map_err(|e| TokenError::Unavailable(e.to_string()))
    }

    /// The API server's address, for the log.
    pub fn server(&self) -> String {
        self.config.cluster_url.to_string()
    }

    pub fn for_audience(config: kube::Config, audience: &str) -> TokenReviews {
        TokenReviews {
            config,
            client: tokio::sync::OnceCell::new(),
            audience: audience.to_owned(),
        }
    }

    /// Asks the API server who `token` belongs to.
    pub async fn review(&self, token: &str) -> Result<ServiceAccountToken, TokenError> {
        let client = self
            .client
            .get_or_try_init(|| async { kube::Client::try_from(self.config.clone()) })
            .await
            .map_err(|e| TokenError::Unavailable(format!("no client for the API server: {e}")))?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let answered = Api::<TokenReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| TokenError::Unavailable(format!("the TokenReview failed: {e}")))?;
        let status = answered.status.ok_or_else(|| {
            TokenError::Unavailable("the API server answered a TokenReview without a status".into())
        })?;
        read_status(&status, &self.audience)
    }
}

/// What a review's status says, read strictly.
pub fn read_status(
    status: &TokenReviewStatus,
    audience: &str,
) -> Result<ServiceAccountToken, TokenError> {
    if status.authenticated != Some(true) {
        let why = status.error.as_deref().unwrap_or("not authenticated");
        return Err(TokenError::Refused(format!(
            "the API server did not authenticate the token: {why}"
        )));
    }
    // The API server answers the audiences it granted, of those asked; none means the token
    // was not checked for ours (an authenticator that ignores audiences), which is not enough.
    if !status
        .audiences
        .as_ref()
        .is_some_and(|granted| granted.iter().any(|a| a == audience))
    {
        return Err(TokenError::Refused(format!(
            "the token is not for the audience `{audience}`"
        )));
    }
    let user = status.user.as_ref();
    let username = user.and_then(|u| u.username.as_deref()).unwrap_or("");
    let Some((namespace, service_account)) = username
        .strip_prefix(SERVICE_ACCOUNT_USER)
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains(':'))
    else {
        return Err(TokenError::Refused(format!(
            "`{username}` is not a ServiceAccount: only pods' ServiceAccount tokens are accepted"
        )));
    };
    let pod = user
        .and_then(|u| u.extra.as_ref())
        .and_then(|extra| extra.get(POD_NAME))
        .and_then(|names| names.first())
        .cloned();
    Ok(ServiceAccountToken {
        namespace: namespace.to_owned(),
        service_account: service_account.to_owned(),
        pod,
    })
}

#[cfg(test)]
mod tests;
