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
