//! The seed's retry-chain table as data: one [`Spec`] per row (how inventory fails, the
//! protocol, the row's own change), with the seed's figure and why each set of defaults gives
//! what it gives.

use crate::samples::inventory::InventoryFails;

/// One row of the seed's table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spec {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    pub(super) grpc: bool,
    pub(super) fails: InventoryFails,
    pub(super) retriable_503: bool,
    pub(super) app_retries: u32,
    /// The seed's figure (Istio's defaults).
    pub(super) seed: u64,
    pub(super) why_istio: &'static str,
    pub(super) why_hopwise: &'static str,
}

pub(super) const ROWS: [Spec; 6] = [
    Spec {
        key: "grpc-down",
        label: "being down, calls over gRPC",
        grpc: true,
        fails: InventoryFails::Down,
        retriable_503: false,
        app_retries: 0,
        seed: 27,
        why_istio: "pricing's proxy makes 3 connection attempts and answers UNAVAILABLE, which is on \
            Istio's list: checkout's proxy retries it, and frontend's proxy retries that (3 × 3 × 3)",
        why_hopwise: "pricing's proxy retried the refused connections (nothing was processed, so \
            even a gRPC POST is safe to retry) and answered UNAVAILABLE, marked retries-exhausted; \
            UNAVAILABLE is not on hopwise's list, so checkout's and frontend's proxies did not retry",
    },
    Spec {
        key: "http-down",
        label: "being down, calls over plain HTTP",
        grpc: false,
        fails: InventoryFails::Down,
        retriable_503: false,
        app_retries: 0,
        seed: 3,
        why_istio: "pricing's proxy makes 3 connection attempts and answers 503; Istio's list has \
            retriable-status-codes but names no code, so nobody above retries a 503",
        why_hopwise: "pricing's proxy retried the refused connections and answered 503, marked \
            retries-exhausted; 503 is not on hopwise's list, so nobody above retried",
    },
    Spec {
        key: "grpc-unavailable",
        label: "answering gRPC UNAVAILABLE",
        grpc: true,
        fails: InventoryFails::Unavailable,
        retriable_503: false,
        app_retries: 0,
        seed: 27,
        why_istio: "UNAVAILABLE is on Istio's list and each proxy passes it up unchanged, so every \
            proxy retries it — a gRPC POST included, since Istio does not ask whether a call is \
            safe to repeat (3 × 3 × 3)",
        why_hopwise: "UNAVAILABLE is not on hopwise's list; and a gRPC call is a POST, not safe to \
            repeat once answered (only_if_safe), so listing `unavailable` would not retry it either",
    },
    Spec {
        key: "http-503",
        label: "answering HTTP 503 at once",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: false,
        app_retries: 0,
        seed: 1,
        why_istio: "Istio's list has retriable-status-codes but names no code: nobody retries a 503",
        why_hopwise: "503 is not on hopwise's list: a fast refusal stays one attempt",
    },
    Spec {
        key: "http-503-retriable",
        label: "answering 503, 503 retriable on every proxy",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: true,
        app_retries: 0,
        seed: 27,
        why_istio: "with 503 named, each proxy retries the 503 it gets from below (3 × 3 × 3)",
        why_hopwise: "pricing's proxy retried (a GET is safe to repeat); it marked its answer \
            retries-exhausted, so checkout's and frontend's did not (single_hop)",
    },
    Spec {
        key: "app-retries",
        label: "the same, and the app retrying twice",
        grpc: false,
        fails: InventoryFails::Http503,
        retriable_503: true,
        app_retries: 2,
        seed: 81,
        why_istio: "the app's 2 retries repeat the whole chain: 3 × 27",
        why_hopwise: "3 per checkout call, as in the row above; the app's own 2 retries repeat the \
            call, and they multiply: 3 × 3 — `hopwise check` counts them from the mesh file's \
            app_retries; retry in one place",
    },
];
