//! A caller's operation as the batch sees it: the type-erased [`Job`], and [`Ran`], a job that
//! has run and waits for the batch's outcome. Apart from the election, which never looks into
//! a job, and from the batch run, which only runs and answers them.

use crate::engine::batch::Batch;
use crate::engine::logical::{LogicalOp, LogicalOut};
use crate::error::{Error, Result};
use crate::sync::answers::Reply;

/// One caller's operation, type-erased.
pub trait Job: Send {
    /// Runs inside the batch's transaction.
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran;
    /// The batch failed before the job ran.
    fn fail(self: Box<Self>, error: &Error);
    /// The operation, when the job can be logged as one (see `engine::logical`): a batch of
    /// such jobs writes its record before it runs.
    fn logical(&mut self) -> Option<&mut LogicalOp> {
        None
    }
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
    pub(super) reply: Reply<Result<T>>,
}

impl<F, T> Job for Call<F, T>
where
    F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran {
        ran(batch.attempt(self.f), self.reply)
    }

    fn fail(self: Box<Self>, error: &Error) {
        self.reply.send(Err(error.duplicate()));
    }
}

/// A job that runs a [`LogicalOp`] and sends its result to the waiting caller.
pub(super) struct LogicalCall {
    pub(super) op: LogicalOp,
    pub(super) reply: Reply<Result<LogicalOut>>,
}

impl Job for LogicalCall {
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran {
        let op = self.op;
        ran(batch.attempt(|b| op.apply(b)), self.reply)
    }

    fn fail(self: Box<Self>, error: &Error) {
        self.reply.send(Err(error.duplicate()));
    }

    fn logical(&mut self) -> Option<&mut LogicalOp> {
        Some(&mut self.op)
    }
}

/// A job's [`Ran`] from its attempt (see `Batch::attempt`): the reply waits for the batch's
/// outcome.
fn ran<T: Send + 'static>(attempt: Result<Result<T>>, reply: Reply<Result<T>>) -> Ran {
    let (result, fatal) = match attempt {
        Ok(result) => (result, None),
        // The caller hears the error; the batch aborts because of it.
        Err(e) => {
            let fatal = e.duplicate();
            (Err(e), Some(fatal))
        }
    };
    Ran {
        fatal,
        deliver: Box::new(move |batch_error| {
            let out = match (result, batch_error) {
                (Ok(_), Some(e)) => Err(e.duplicate()),
                (r, _) => r,
            };
            reply.send(out);
        }),
    }
}
