//! The key and priority of live messages that carry either: kept beside the index in
//! `State::tags`, looked up only for messages whose `Msg` is marked.

use super::{IdMap, Msg, State, Tag};
use crate::journal::record::TagRecord;

impl State {
    /// The key and priority of message `m` (id `id`), when it carries any.
    pub fn tag_of(&self, m: &Msg, id: u64) -> Option<&Tag> {
        tag_in(&self.tags, m, id)
    }

    /// The key of live message `m` (id `id`), if it carries one.
    pub fn key_of(&self, m: &Msg, id: u64) -> Option<sluice_core::MessageKey> {
        let key = self.tag_of(m, id)?.key.as_deref()?;
        sluice_core::MessageKey::new(key).ok()
    }

    /// The priority live message `m` (id `id`) is delivered at: its own, else `default`.
    pub fn priority_of(&self, m: &Msg, id: u64, default: u8) -> u8 {
        self.tag_of(m, id)
            .and_then(|t| t.priority)
            .unwrap_or(default)
    }

    /// Keeps the tag of message `id` from its base record, when it has a key or a priority,
    /// and marks `msg` as tagged.
    pub(super) fn keep_tag(&mut self, msg: &mut Msg, id: u64, tag: Option<&TagRecord>) {
        if let Some(t) = tag.filter(|t| t.key.is_some() || t.priority.is_some()) {
            msg.set_tagged();
            self.tags.insert(
                id,
                Tag {
                    key: t.key.as_deref().map(std::sync::Arc::from),
                    priority: t.priority,
                },
            );
        }
    }
}

/// The tag of message `m` (id `id`) in `tags`, when it carries one.
pub(super) fn tag_in<'a>(tags: &'a IdMap<u64, Tag>, m: &Msg, id: u64) -> Option<&'a Tag> {
    if m.tagged() { tags.get(&id) } else { None }
}
