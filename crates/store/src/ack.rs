//! The save path's acknowledgement: a write is queued at once (fire-and-forget), and the
//! [`Ack`] resolves once it is durable. Dropping an `Ack` does not cancel the write.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use tokio::sync::oneshot;

use crate::error::{Result, StoreError};

#[must_use = "an Ack can be awaited for durability, or dropped to fire and forget"]
pub struct Ack<T>(AckInner<T>);

enum AckInner<T> {
    Pending(oneshot::Receiver<Result<T>>),
    Ready(Result<T>),
}

/// The sending half, kept by the writer until the batch holding the write commits.
pub type AckSender<T> = oneshot::Sender<Result<T>>;

impl<T> Ack<T> {
    pub fn channel() -> (AckSender<T>, Ack<T>) {
        let (tx, rx) = oneshot::channel();
        (tx, Ack(AckInner::Pending(rx)))
    }

    pub fn ready(result: Result<T>) -> Ack<T> {
        Ack(AckInner::Ready(result))
    }

    /// The error of a write that has failed already, without waiting for one still queued
    /// (`None` while it is, and once it succeeded). Awaiting the ack afterwards still gives
    /// its result.
    pub fn failed_already(&mut self) -> Option<&StoreError> {
        if let AckInner::Pending(rx) = &mut self.0 {
            match rx.try_recv() {
                Ok(result) => self.0 = AckInner::Ready(result),
                Err(_) => return None,
            }
        }
        match &self.0 {
            AckInner::Ready(Err(e)) => Some(e),
            _ => None,
        }
    }
}

impl<T: Send + 'static> IntoFuture for Ack<T> {
    type Output = Result<T>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            match self.0 {
                AckInner::Ready(result) => result,
                AckInner::Pending(rx) => rx.await.unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "the writer stopped before the write was committed".into(),
                    ))
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_write_is_seen_without_waiting_and_still_awaited() {
        let (tx, mut ack) = Ack::<u32>::channel();
        assert!(ack.failed_already().is_none(), "still queued");
        let _ = tx.send(Err(StoreError::InvalidState("over".into())));
        assert!(matches!(
            ack.failed_already(),
            Some(StoreError::InvalidState(_))
        ));
        assert!(matches!(ack.await, Err(StoreError::InvalidState(_))));
        let (tx, mut ok) = Ack::<u32>::channel();
        let _ = tx.send(Ok(7));
        assert!(ok.failed_already().is_none());
        assert_eq!(ok.await, Ok(7));
    }
}
