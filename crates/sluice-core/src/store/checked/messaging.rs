//! `Messaging` through the checking layer: the hot path (send, receive, ack and the other
//! settlements), each call checked and then handed to the engine's own future.

use super::*;

impl<S: Messaging> Messaging for Checked<S> {
    fn send<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        messages: Vec<NewMessage>,
    ) -> Answer<'a, Result<Vec<SendOutcome>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_send_batch(&messages) {
            return refused(e);
        }
        self.engine.send(queue, messages)
    }

    fn receive<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        req: ReceiveRequest,
    ) -> Answer<'a, Result<Vec<Delivery>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_receive(&req) {
            return refused(e);
        }
        self.engine.receive(queue, req)
    }

    fn ack<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        acks: Vec<AckRequest>,
    ) -> Answer<'a, Result<Vec<Result<(), StoreError>>, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_ack_batch(acks.len()).and_then(|()| validate_ack_results(&acks)) {
            return refused(e);
        }
        self.engine.ack(queue, acks)
    }

    fn nack<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
        delay: Option<Duration>,
        mut failure: Failure,
    ) -> Answer<'a, Result<NackOutcome, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_nack_delay(delay) {
            return refused(e);
        }
        if failure.retry_after && delay.is_none() {
            return refused(StoreError::invalid(
                "a nack marked as the dependency's Retry-After needs its delay; give the delay \
                 the dependency asked for",
            ));
        }
        if let Err(e) = check_failure(&failure) {
            return refused(e);
        }
        clip(&mut failure);
        self.engine.nack(queue, receipt, delay, failure)
    }

    fn reject<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
        mut failure: Failure,
    ) -> Answer<'a, Result<QueueName, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = check_failure(&failure) {
            return refused(e);
        }
        clip(&mut failure);
        self.engine.reject(queue, receipt, failure)
    }

    fn move_message<'s, 'q, 't, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
        to: &'t QueueName,
        mut failure: Failure,
    ) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        'q: 'a,
        't: 'a,
        Self: 'a,
    {
        if let Err(e) = check_failure(&failure) {
            return refused(e);
        }
        if let Err(e) = validate_move(queue, to) {
            return refused(e);
        }
        clip(&mut failure);
        self.engine.move_message(queue, receipt, to, failure)
    }

    fn release<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
    ) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        self.engine.release(queue, receipt)
    }

    fn extend<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
        visibility: Duration,
    ) -> Answer<'a, Result<LeaseState, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = validate_visibility(visibility) {
            return refused(e);
        }
        self.engine.extend(queue, receipt, visibility)
    }

    fn progress<'s, 'q, 'a>(
        &'s self,
        queue: &'q QueueName,
        receipt: Receipt,
        progress: Progress,
    ) -> Answer<'a, Result<LeaseState, StoreError>>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        if let Err(e) = progress.validate() {
            return refused(e);
        }
        self.engine.progress(queue, receipt, progress)
    }

    fn cancel<'s, 'a>(&'s self, id: MessageId) -> Answer<'a, Result<Message, StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.cancel(id)
    }

    fn hints(&self) -> Hints {
        self.hints
    }

    /// Answered from the hints read at wrapping; only [`AckOverlap::PerQueue`] asks the
    /// engine.
    fn lease_may_overlap_ack<'s, 'q, 'a>(&'s self, queue: &'q QueueName) -> Answer<'a, bool>
    where
        's: 'a,
        'q: 'a,
        Self: 'a,
    {
        match self.hints.ack_overlap {
            AckOverlap::Never => Box::pin(std::future::ready(false)),
            AckOverlap::Always => Box::pin(std::future::ready(true)),
            AckOverlap::PerQueue => self.engine.lease_may_overlap_ack(queue),
        }
    }

    fn close<'s, 'a>(&'s self) -> Answer<'a, ()>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.close()
    }

    fn writable<'s, 'a>(&'s self) -> Answer<'a, Result<(), StoreError>>
    where
        's: 'a,
        Self: 'a,
    {
        self.engine.writable()
    }
}
