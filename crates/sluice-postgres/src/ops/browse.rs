//! Reading and removing single messages without leasing: browse, get, delete.

use sluice_core::store::BrowseCursor;
use sluice_core::{
    BrowsePage, BrowseRequest, BrowseState, Message, MessageId, QueueName, StoreError,
};

use crate::db::effects::Effects;
use crate::db::row::{FULL_COLS, message_of};
use crate::error::{corrupt, db};
use crate::expiry::{expire_queue, expire_with_sources};
use crate::store::Inner;

/// One page of a queue's messages in the requested states.
pub(crate) async fn browse(
    inner: &Inner,
    queue: &QueueName,
    req: BrowseRequest,
) -> Result<BrowsePage, StoreError> {
    let after = req
        .cursor
        .as_deref()
        .map(str::parse::<BrowseCursor>)
        .transpose()?
        .map(|c| (c.part, c.at, c.id as i64));
    let q = queue.as_str();
    let mut conn = inner.conn().await?;
    let (mut found, fx) = crate::db::tx::transaction(&mut conn, async |tx| {
        let cfg = crate::db::catalog::config(tx, q, false).await?;
        let now = inner.now();
        let mut fx = Effects::default();
        expire_with_sources(tx, q, &cfg, now, &mut fx).await?;
        // Browsing pages through rows: the queue's packs become rows first.
        crate::hot::packs::unpack_queue(tx, queue).await?;
        let tags: &[u8] = match req.state {
            BrowseState::InFlight => &[0],
            BrowseState::Visible => &[1],
            BrowseState::Delayed => &[2],
            BrowseState::All => &[0, 1, 2],
        };
        let want = i64::from(req.limit) + 1;
        let mut found: Vec<(u8, i64, Message)> = Vec::new();
        for &tag in tags {
            let (from_at, from_id) = match after {
                Some((t, at, id)) if t == tag => (at, id),
                Some((t, _, _)) if t > tag => continue,
                _ => (i64::MIN, i64::MIN),
            };
            let cond = match tag {
                0 => "state = 1",
                1 => "state = 0 AND visible_at <= $2",
                _ => "state = 0 AND visible_at > $2",
            };
            let rows = tx
                .query(
                    &format!(
                        "SELECT {FULL_COLS} FROM messages
                         WHERE queue = $1 AND {cond} AND $2::bigint IS NOT NULL
                               AND (visible_at, id) > ($3, $4)
                         ORDER BY visible_at, id LIMIT $5"
                    ),
                    &[&q, &now, &from_at, &from_id, &(want - found.len() as i64)],
                )
                .await
                .map_err(|e| db(&e))?;
            for r in &rows {
                let m = message_of(r, now)?;
                let at: i64 = r.try_get(3).map_err(corrupt)?;
                found.push((tag, at, m));
            }
            if found.len() as i64 >= want {
                break;
            }
        }
        fx.write(tx).await?;
        Ok((found, fx))
    })
    .await?;
    fx.after_commit(inner);
    let limit = req.limit as usize;
    let next_cursor = if found.len() > limit {
        found.get(limit - 1).map(|(part, at, m)| {
            BrowseCursor {
                part: *part,
                at: *at,
                id: m.id.0,
            }
            .to_string()
        })
    } else {
        None
    };
    found.truncate(limit);
    Ok(BrowsePage {
        messages: found.into_iter().map(|(_, _, m)| m).collect(),
        next_cursor,
    })
}

/// One message wherever it is, including completed records still kept.
pub(crate) async fn get_message(inner: &Inner, id: MessageId) -> Result<Message, StoreError> {
    let mut conn = inner.conn().await?;
    let (row, fx, now) = crate::db::tx::transaction(&mut conn, async |tx| {
        let now = inner.now();
        let key = id.0 as i64;
        crate::hot::packs::unpack_member(tx, key).await?;
        let found = tx
            .query_opt("SELECT queue FROM messages WHERE id = $1", &[&key])
            .await
            .map_err(|e| db(&e))?;
        let Some(found) = found else {
            return Err(StoreError::MessageNotFound(id));
        };
        let queue: String = found.get(0);
        let mut fx = Effects::default();
        if let Ok(cfg) = crate::db::catalog::config(tx, &queue, false).await {
            expire_queue(tx, &queue, &cfg, now, &mut fx).await?;
        }
        let row = tx
            .query_opt(
                &format!(
                    "SELECT {FULL_COLS} FROM messages
                     WHERE id = $1 AND NOT (state = 2 AND keep_until <= $2)"
                ),
                &[&key, &now],
            )
            .await
            .map_err(|e| db(&e))?;
        fx.write(tx).await?;
        Ok((row, fx, now))
    })
    .await?;
    fx.after_commit(inner);
    match row {
        Some(r) => message_of(&r, now),
        None => Err(StoreError::MessageNotFound(id)),
    }
}

/// Removes one message or completed record.
pub(crate) async fn delete_message(inner: &Inner, id: MessageId) -> Result<(), StoreError> {
    let mut conn = inner.conn().await?;
    let gone = crate::db::tx::transaction(&mut conn, async |tx| {
        crate::hot::packs::unpack_member(tx, id.0 as i64).await?;
        tx.query_opt(
            "DELETE FROM messages WHERE id = $1 AND NOT (state = 2 AND keep_until <= $2)
             RETURNING queue, grp IS NOT NULL AND state < 2",
            &[&(id.0 as i64), &inner.now()],
        )
        .await
        .map_err(|e| db(&e))
    })
    .await?;
    let Some(gone) = gone else {
        return Err(StoreError::MessageNotFound(id));
    };
    if gone.get::<_, bool>(1) {
        // It left its group's line: the next member may go.
        inner.wake(gone.get::<_, &str>(0));
    }
    for local in inner.locals.all() {
        local.read_ahead.forget_message(id);
    }
    Ok(())
}
