//! A caller's operation as the batch sees it: the type-erased [`Job`], and [`Ran`], a job that
//! has run and waits for the batch's outcome. Apart from the election, which never looks into
//! a job, and from the batch run, which only runs and answers them.

use crate::engine::batch::Batch;
use crate::error::{Error, Result};
use crate::sync::channel::Sender;

/// One caller's operation, type-erased.
pub trait Job: Send {
    /// Runs inside the batch's transaction.
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran;
    /// The batch failed before the job ran.
    fn fail(self: Box<Self>, error: &Error);
}

/// Hands a job's result to its caller once the batch's outcome (`Some` = failed) is known.
type Deliver = Box<dyn FnOnce(Option<&Error>) + Send>;

/// A job that has run and waits for the batch's outcome.
pub struct Ran {
    /// Set when the job failed after writing: the batch cannot commit.
    pub(super) fatal: Option<Error>,
    pub(super) deliver: Deliver,
}

/// A job that runs a closure and sends its result to the waiting caller.
pub(super) struct Call<F, T> {
    pub(super) f: F,
    pub(super) reply: Sender<Result<T>>,
}

impl<F, T> Job for Call<F, T>
where
    F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran {
        let (result, fatal) = match batch.attempt(self.f) {
            Ok(result) => (result, None),
            // The caller hears the error; the batch aborts because of it.
            Err(e) => {
                let fatal = e.duplicate();
                (Err(e), Some(fatal))
            }
        };
        let reply = self.reply;
        Ran {
            fatal,
            deliver: Box::new(move |batch_error| {
                let out = match (result, batch_error) {
                    (Ok(_), Some(e)) => Err(e.duplicate()),
                    (r, _) => r,
                };
                let _ = reply.send(out);
            }),
        }
    }

    fn fail(self: Box<Self>, error: &Error) {
        let _ = self.reply.send(Err(error.duplicate()));
    }
}
