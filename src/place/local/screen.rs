//! What the local supervisor shows the person at the terminal ([`Screen`],
//! supplied by the front door) and what its loop hears from the threads that
//! watch agents and carry out work ([`Msg`]). Both the loop
//! ([`super::supervisor`]) and the executor ([`super::executor`]) use them;
//! neither owns them.

use crate::engine::{self, Input, OperationState};

/// Messages from watcher and worker threads to the loop.
pub(crate) enum Msg {
    Finished(engine::DispatchId),
    Activity(engine::DispatchId),
    // Boxed: an input is large and the other messages are an id.
    Input(Box<Input>),
}

/// What the person at the terminal is shown; the front door supplies it.
pub trait Screen: Send {
    /// The events of one recorded decision.
    fn events(&mut self, events: &[engine::Event]);
    /// A notice, a build gate starting, an error the person should know of.
    fn notice(&mut self, text: &str);
    /// The status changed.
    fn status(&mut self, st: &OperationState);
    /// The operation's last state, once the loop has ended: a live view
    /// draws it whatever its pacing, so its final frame is the final state.
    fn finish(&mut self, st: &OperationState) {
        self.status(st);
    }
}
