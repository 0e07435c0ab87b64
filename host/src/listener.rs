//! The accept loop every HTTP listener runs (the MCP endpoint, the admin endpoint, the
//! metrics one), and the limits a connection meets before any request is read: a cap on
//! open connections (more wait in the kernel's backlog), and a time limit on a request's
//! headers, so a client that trickles them (slowloris) or holds an idle keep-alive
//! connection is closed. Each request learns its client's address, for per-address limits.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::{Method, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::workers::{Seat, Workers};

/// Connection limits of the HTTP server.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time allowed for a request's headers, counted from when the connection is ready for a
    /// request: it also closes keep-alive connections idle that long.
    pub header_timeout: Duration,
    /// Largest request head (request line and headers), in bytes: a connection's read buffer
    /// is bounded by it, so open connections cannot hold more than this each (431 beyond).
    pub max_header_bytes: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits { max_connections: 1024, header_timeout: Duration::from_secs(30), max_header_bytes: 64 << 10 }
    }
}

/// Connections open at once on a listener beside the MCP endpoint (admin, metrics): a few,
/// so that clients holding them open cannot take the file descriptors the endpoint needs.
const SIDE_CONNECTIONS: usize = 64;

/// Listen on `addr` and serve `app` there until `shutdown` fires, with [`SIDE_CONNECTIONS`]
/// and the endpoint's `header_timeout`; the log says `{what} on http://{address}{path}`. The
/// address listened on.
pub async fn side(
    addr: SocketAddr,
    app: Router,
    (what, path): (&str, &str),
    header_timeout: Duration,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!("{what} on http://{local}{path}");
    let limits = ConnectionLimits { max_connections: SIDE_CONNECTIONS, header_timeout, max_header_bytes: 16 << 10 };
    tokio::spawn(run(listener, app, limits, Workers::default(), shutdown));
    Ok(local)
}

/// Whether a response is an event stream.
fn is_event_stream(response: &Response) -> bool {
    response.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
}

/// A GET's event stream (a legacy session's, or a POST stream resumed) holds its connection
/// until it ends, carrying no request: the connection is not counted where new ones are
/// placed for as long as the stream's body lives.
fn aside_while_streaming(response: Response, seat: &Seat) -> Response {
    let aside = seat.aside();
    response.map(|body| {
        // The stream owns the guard, so it is dropped with the body, however that ends.
        Body::from_stream(body.into_data_stream().inspect(move |_| {
            let _owned = &aside;
        }))
    })
}

/// The address of the client that sent a request.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// Accept connections until `shutdown` fires, serve each on the worker `workers` picks, then
/// let the open ones finish.
pub async fn run(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    workers: Workers,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let (app, head, shutdown) = (app.clone(), (limits.header_timeout, limits.max_header_bytes), shutdown.clone());
        let assigned = workers.assign();
        let (worker, seat) = (assigned.handle().cloned(), assigned.seat());
        let serving = move |stream| async move {
            serve(stream, peer, seat, app, head, shutdown).await;
            drop((permit, assigned));
        };
        let Some(worker) = worker else {
            connections.spawn(serving(stream));
            continue;
        };
        // The socket leaves this runtime's reactor and joins the worker's.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(%peer, "could not move a connection to a worker: {e}");
                continue;
            }
        };
        connections.spawn_on(
            async move {
                match TcpStream::from_std(stream) {
                    Ok(stream) => serving(stream).await,
                    Err(e) => tracing::debug!(%peer, "could not move a connection to a worker: {e}"),
                }
            },
            &worker,
        );
    }
    // New clients are refused from now on, not left waiting on a socket nobody accepts.
    drop(listener);
    connections.close();
    // Open connections finish what they were answering, for a while: a client that reads
    // nothing (or sends half a request) must not keep the server from exiting.
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait()).await.is_err() {
        tracing::warn!(
            "{} connections still open {}s after shutdown began; closing them",
            connections.len(),
            SHUTDOWN_GRACE.as_secs()
        );
    }
}

/// How long open connections get to finish once shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    seat: Seat,
    app: Router,
    (header_timeout, max_header_bytes): (Duration, usize),
    shutdown: CancellationToken,
) {
    // Without TCP_NODELAY an SSE response waits on Nagle and delayed ACKs (~40 ms).
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY: {e}");
    }
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ClientAddr(peer.ip()));
        let app = app.clone();
        let seat = (request.method() == Method::GET).then(|| seat.clone());
        async move {
            let response = app.oneshot(request.map(Body::new)).await.unwrap_or_else(|e| match e {});
            Ok::<_, Infallible>(match seat {
                Some(seat) if is_event_stream(&response) => aside_while_streaming(response, &seat),
                _ => response,
            })
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper answers 431 to a head over `max_header_bytes` (counted exactly, however it
    // arrives), or with more than 100 header fields, and caps its read buffer near that size.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(max_header_bytes)
        .max_header_size(max_header_bytes);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(%peer, "connection ended: {e}");
            }
            return;
        }
        () = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    if let Err(e) = connection.await {
        tracing::debug!(%peer, "connection ended: {e}");
    }
}
