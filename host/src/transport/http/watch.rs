//! Waiting for a change that a [`Notify`] announces: a GET stream or a resumable POST stream
//! waiting for its next event, a request waiting for its reader to make room.

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a look at the watched state found.
pub enum Look<T> {
    /// What was waited for.
    Ready(T),
    /// Nothing will come any more.
    Over,
    /// Not yet: wait for the next announcement.
    Wait,
}

/// Look at the state with `look` until it is ready or over, waiting for `wake` between
/// looks; `None` if it is over, or `ended` fires first. The waiter is registered before
/// each look, so an announcement made while looking is not missed.
pub async fn until<T>(wake: &Notify, ended: &CancellationToken, mut look: impl FnMut() -> Look<T>) -> Option<T> {
    loop {
        let notified = wake.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        match look() {
            Look::Ready(found) => return Some(found),
            Look::Over => return None,
            Look::Wait => {}
        }
        tokio::select! {
            () = notified => {}
            () = ended.cancelled() => return None,
        }
    }
}
