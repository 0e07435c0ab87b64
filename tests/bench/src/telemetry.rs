//! What watching costs: the same `calc` served by a plain server and by one that exports
//! every span over OTLP (to a sink here, standing in for a collector) while its `/metrics`
//! is scraped every second (a scrape interval 15 times tighter than Prometheus's default).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::{get, post};

/// An OTLP/HTTP trace endpoint that accepts every export (an empty body is an empty
/// `ExportTraceServiceResponse`) and counts the bytes it was sent (`GET /received`). It runs
/// in a child process of its own, as a collector would: inside the harness it would share the
/// load generator's workers and slow the clients rather than the server.
pub async fn sink() -> anyhow::Result<()> {
    let received = Arc::new(AtomicU64::new(0));
    let counted = received.clone();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body: Bytes| async move {
                counted.fetch_add(body.len() as u64, Ordering::Relaxed);
                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")]
            }),
        )
        .route("/received", get(move || async move { received.load(Ordering::Relaxed).to_string() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    eprintln!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// The bytes the sink at `addr` has received.
pub async fn received(addr: SocketAddr) -> anyhow::Result<u64> {
    Ok(reqwest::get(format!("http://{addr}/received")).await?.text().await?.trim().parse()?)
}

/// Scrape `http://addr/metrics` every second until dropped; counts the scrapes that worked.
pub struct Scraper {
    task: tokio::task::JoinHandle<()>,
    pub scrapes: Arc<AtomicU64>,
}

impl Scraper {
    pub fn start(addr: SocketAddr) -> Scraper {
        let scrapes = Arc::new(AtomicU64::new(0));
        let counted = scrapes.clone();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let url = format!("http://{addr}/metrics");
            loop {
                if let Ok(response) = client.get(&url).send().await
                    && response.status().is_success()
                    && response.bytes().await.is_ok()
                {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Scraper { task, scrapes }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
