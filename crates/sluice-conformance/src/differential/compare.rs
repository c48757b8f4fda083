//! Turning what an engine answers into the model's terms, and comparing.

use std::collections::BTreeMap;

use sluice_core::message::{Message, MessageId, MessageState};

use super::model::View;

/// Engine ids and model ids of one engine, both ways.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    /// Model id → engine id.
    pub engine: Vec<MessageId>,
    /// Engine id → model id.
    pub model: BTreeMap<MessageId, usize>,
}

impl Ids {
    /// Records the engine id of the next model id.
    pub fn push(&mut self, id: MessageId) -> Result<usize, String> {
        if self.model.contains_key(&id) {
            return Err(format!("engine id {id} handed out twice"));
        }
        let n = self.engine.len();
        self.engine.push(id);
        self.model.insert(id, n);
        Ok(n)
    }

    /// The model id of an engine id.
    pub fn of(&self, id: MessageId) -> Result<usize, String> {
        self.model
            .get(&id)
            .copied()
            .ok_or_else(|| format!("engine id {id} was never sent"))
    }
}

fn state_name(s: MessageState) -> &'static str {
    match s {
        MessageState::Delayed => "delayed",
        MessageState::Visible => "visible",
        MessageState::InFlight => "in_flight",
        MessageState::Completed => "completed",
    }
}

/// The engine's message in the model's terms. `attempts_known` false leaves attempts out.
///
/// # Errors
/// An id the engine never handed out.
pub fn view_of(ids: &Ids, m: &Message, attempts_known: bool) -> Result<View, String> {
    Ok(View {
        id: ids.of(m.id)?,
        queue: m.queue.to_string(),
        state: state_name(m.state),
        body: m.body.clone(),
        attributes: m.attributes.clone(),
        enqueued_at: m.enqueued_at.as_millis(),
        entered_at: m.entered_at.as_millis(),
        visible_at: m.visible_at.map(|t| t.as_millis()),
        receive_count: m.receive_count,
        last_error: m.last_error.clone(),
        attempts: attempts_known.then(|| {
            m.attempts
                .iter()
                .map(|a| {
                    (
                        a.at.as_millis(),
                        format!("{:?}", a.outcome),
                        a.error.clone(),
                        a.consumer.clone(),
                        a.started_at.map(|t| t.as_millis()),
                    )
                })
                .collect()
        }),
        dedup_id: m.dedup_id.clone(),
        source_queue: m.source_queue.as_ref().map(ToString::to_string),
        dead_letter: m
            .dead_letter
            .as_ref()
            .map(|d| (d.reason.as_str(), d.at.as_millis())),
        result: m.result.clone(),
        completed_at: m.completed_at.map(|t| t.as_millis()),
        cancelled: m.cancelled,
        group: m.group.as_ref().map(ToString::to_string),
        key: m.key.as_ref().map(ToString::to_string),
        priority: m.priority,
        trace: crate::differential::model::trace_view(m.trace.as_ref()),
    })
}

/// Whether two views agree in every field.
pub fn same(engine: &View, model: &View) -> bool {
    diff(engine, model).is_empty()
}

/// The fields in which two views differ, named, for a readable failure.
pub fn diff(engine: &View, model: &View) -> String {
    let mut out = Vec::new();
    macro_rules! field {
        ($($f:ident),*) => {$(
            if engine.$f != model.$f {
                out.push(format!("{}: engine {:?}, model {:?}", stringify!($f), engine.$f, model.$f));
            }
        )*};
    }
    field!(
        queue,
        state,
        body,
        attributes,
        enqueued_at,
        entered_at,
        visible_at,
        receive_count,
        last_error,
        dedup_id,
        source_queue,
        dead_letter,
        result,
        completed_at,
        cancelled,
        group,
        key,
        priority,
        trace
    );
    if engine.attempts.is_some() && model.attempts.is_some() && engine.attempts != model.attempts {
        out.push(format!(
            "attempts: engine {:?}, model {:?}",
            engine.attempts, model.attempts
        ));
    }
    out.join("; ")
}
