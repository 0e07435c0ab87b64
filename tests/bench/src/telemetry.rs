//! What watching costs: the same `calc` served by a plain server and by one that exports
//! every span over OTLP (to a sink here, standing in for a collector) while its `/metrics`
//! is scraped every second (a scrape interval 15 times tighter than Prometheus's default).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;

/// An OTLP/HTTP trace endpoint that accepts every export (an empty body is an empty
/// `ExportTraceServiceResponse`) and counts the bytes it was sent.
pub struct Sink {
    pub endpoint: String,
    pub received: Arc<AtomicU64>,
}

impl Sink {
    pub async fn start() -> anyhow::Result<Sink> {
        let received = Arc::new(AtomicU64::new(0));
        let counted = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: Bytes| async move {
                counted.fetch_add(body.len() as u64, Ordering::Relaxed);
                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")]
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Sink { endpoint: format!("http://{addr}"), received })
    }
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
