//! A gateway behind a proxy of its own (`gateway.trusted_proxies`, issue 29), driven by curl:
//! the per-client rate limit counts each client the trusted proxy names in `X-Forwarded-For`,
//! not the proxy's one address, and the app is told that client; a peer that is not trusted is
//! the client whatever its header says. The mesh is `gateway/fixture.rs`'s; curl is the
//! load balancer (it connects from 127.0.0.1).

#![allow(clippy::unwrap_used)] // test setup: a failure should fail the test loudly

// Shared with `gateway.rs`, which uses the rest of it.
#[allow(dead_code)]
#[path = "gateway/fixture.rs"]
mod fixture;
mod support;

use fixture::*;
use hopwise_model::rate::Limit;

/// `per_client` at 1 a second, burst 2, and `trusted_proxies` as given.
async fn behind(trusted: &[&str]) -> Edge {
    let trusted: Vec<_> = trusted.iter().map(|t| t.parse().unwrap()).collect();
    edge_with(|c| {
        let g = c.gateway.as_mut().unwrap();
        g.gateway.per_client = Some(Limit { rate: 1, burst: 2 });
        g.gateway.trusted_proxies = trusted;
    })
    .await
}

/// Three requests for each of two clients (a curl, one connection, for each: the load balancer
/// connects from 127.0.0.1 either way): the status codes, and what the app was told of each.
async fn as_two_clients(e: &Edge) -> (Vec<String>, Vec<String>) {
    let [r, t, url] = at("http", "shop.example", e.http(), "/");
    let (mut codes, mut told) = (Vec::new(), Vec::new());
    for client in ["203.0.113.7", "198.51.100.9"] {
        // What a load balancer appends after a client's own claim (1.2.3.4).
        let xff = format!("X-Forwarded-For: 1.2.3.4, {client}");
        let mut args = vec![r.as_str(), t.as_str(), "-H", &xff];
        args.extend(
            [url.as_str(); 3]
                .iter()
                .flat_map(|u| ["-w", "\n@%{http_code}\n", *u]),
        );
        let got = curl(&args).await;
        let text = format!("{}\n{}", got.body, got.out);
        codes.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix('@'))
                .map(str::to_owned),
        );
        told.extend(
            (text.lines())
                .filter_map(|l| l.split(" xff=").nth(1))
                .map(|x| x.split(' ').next().unwrap_or("").to_owned()),
        );
    }
    (codes, told)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_client_it_names_has_its_own_limit() {
    let e = behind(&["127.0.0.0/8"]).await;
    let (codes, told) = as_two_clients(&e).await;
    assert_eq!(codes, ["200", "200", "429", "200", "200", "429"]);
    assert_eq!(
        told,
        ["203.0.113.7", "203.0.113.7", "198.51.100.9", "198.51.100.9"],
        "the client the proxy saw, never its own claim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_is_the_client_whatever_its_header_says() {
    let e = behind(&["10.0.0.0/8"]).await;
    let (codes, told) = as_two_clients(&e).await;
    assert_eq!(codes, ["200", "200", "429", "429", "429", "429"]);
    assert_eq!(told, ["127.0.0.1", "127.0.0.1"]);
}
