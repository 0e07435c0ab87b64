//! Capsule's integration tests: the real `capsule` binary, real plugins compiled to
//! `wasm32-wasip2` (target/plugins), real sockets on 127.0.0.1 and real pipes, driven by the
//! official conformance suite, the official Python and TypeScript SDK clients, and raw
//! HTTP for the cases no client would send.

mod auth;
mod bad_input;
mod battery;
mod clients;
mod conformance;
mod fuzz;
mod hardening;
mod holding;
mod hotswap;
mod languages;
mod protocol;
mod proxy;
mod quotas;
mod sandbox;
mod support;
mod telemetry;
mod tenants;
mod wire;
