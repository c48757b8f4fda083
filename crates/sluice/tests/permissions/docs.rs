//! `docs/permissions.md`, generated from the tables the matrix checks the broker against, so
//! the page says exactly what the broker does. `SLUICE_BLESS=1` writes the page anew.

use std::fmt::Write as _;

use sluice_server::auth::Action;

use crate::{ACTIONS, ROLES, Reach, roles_for};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/permissions.md");

/// The roles that may do all of `needs`.
fn who(needs: &[Action]) -> String {
    let roles: Vec<&str> = ROLES
        .iter()
        .filter(|r| needs.iter().all(|a| roles_for(*a).contains(r)))
        .map(|r| r.as_str())
        .collect();
    if roles.len() == ROLES.len() {
        "every role".to_owned()
    } else {
        roles.join(", ")
    }
}

fn what(needs: &[Action]) -> String {
    if needs.is_empty() {
        "—".to_owned()
    } else {
        needs
            .iter()
            .map(|a| a.describe())
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// What a key gets outside its patterns; `refused` and `unknown` say it in the protocol's
/// terms.
fn outside<U>(reach: Reach<U>, refused: &str, unknown: impl Fn(U) -> String) -> String {
    match reach {
        Reach::Public => "needs no key".to_owned(),
        Reach::Global => "names no queue; lists only the key's".to_owned(),
        Reach::Queue => refused.to_owned(),
        Reach::Id(u) => unknown(u),
        Reach::EveryQueue => format!("{refused}, inside too, unless the key's pattern is `*`"),
    }
}

fn table_head(out: &mut String, first: &str) {
    out.push_str(&format!(
        "| {first} | needs | roles | outside the key's patterns |\n|---|---|---|---|\n"
    ));
}

fn row(out: &mut String, name: &str, form: &str, needs: &[Action], outside: String) {
    let form = if form.is_empty() {
        String::new()
    } else {
        format!(" ({form})")
    };
    let roles = if needs.is_empty() && outside == "needs no key" {
        "anyone".to_owned()
    } else {
        who(needs)
    };
    let _ = writeln!(
        out,
        "| `{name}`{form} | {} | {roles} | {outside} |",
        what(needs)
    );
}

/// The page.
pub fn page() -> String {
    let mut out = String::from(
        "# Who may do what\n\n\
         <!-- Generated from the tables of crates/sluice/tests/permissions, which check every \
         operation below against a running broker; `SLUICE_BLESS=1 cargo test -p sluice --test \
         permissions` writes it anew. -->\n\n\
         Every API key (`[[keys]]`, for HTTP and frames) and SQS access key (`[[sqs_keys]]`) has \
         one role and a list of queue-name patterns. The role decides what the key may do:\n\n",
    );
    out.push_str("| action |");
    for r in ROLES {
        let _ = write!(out, " {} |", r.as_str());
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(ROLES.len()));
    out.push('\n');
    for a in ACTIONS {
        let _ = write!(out, "| {} |", a.describe());
        for r in ROLES {
            out.push_str(if roles_for(a).contains(&r) {
                " ✓ |"
            } else {
                " |"
            });
        }
        out.push('\n');
    }
    out.push_str(
        "\nThe patterns decide where. A queue a request names outside them is refused; a \
         message, task, redrive job or schedule of such a queue, named by its id, answers as \
         one that does not exist, so that ids reveal no other queue (a redrive job is of every \
         queue it names: its source, its destination, the source its filter keeps; over SQS a \
         message move task is such a job, so `ListMessageMoveTasks` leaves out a task whose \
         destination the key does not cover); lists and counts (queues, \
         stats, `/metrics`, audit, redrives, schedules) show only the queues the key covers; \
         and a redrive without destination, which sends each message back to its own source \
         queue, needs a key whose pattern is `*`. A request without a valid key is answered \
         401 `unauthenticated` (over frames `unauthenticated`; over SQS \
         `MissingAuthenticationToken` or `InvalidClientTokenId`), except where it needs no \
         key.\n\n\
         The last column says what a key gets for a queue outside its patterns. Where a request \
         names queues in more than one place, a row says which of them is outside (\"naming \
         it as `to`\"); the others are covered.\n\n\
         Where this is declared and enforced: every operation of the three protocols has one \
         line in the broker's permission table (`sluice_core::access::operations`), naming \
         the actions it needs and the queue they apply to. Each protocol looks its operation \
         up there before anything runs — the HTTP API in one layer in front of every route, \
         the frame protocol and the SQS endpoint in their dispatchers — and checks the \
         caller's role and the queue the request's address names; an operation missing from \
         the table is refused. The queues a request names elsewhere (a body, an id once \
         found) are checked with the same actions by the operation when it reads them. The \
         tables below are the test that holds the broker to this page.\n\n## HTTP API\n\n",
    );
    table_head(&mut out, "operation");
    for r in crate::http::routes() {
        let outside = outside(r.reach, "403 `permission_denied`", |u| match u {
            crate::http::Unknown::NotFound(code) => format!("404 `{code}`, as an unknown id"),
            crate::http::Unknown::TaskUnknown => "status `UNKNOWN`, as an unknown task".to_owned(),
        });
        row(
            &mut out,
            &format!("{} {}", r.method, r.path),
            r.form,
            r.needs,
            outside,
        );
    }
    out.push_str("\n## Frames\n\n");
    table_head(&mut out, "op");
    let sample = crate::frames::blank();
    for (op, form) in crate::frames::requests(&sample, &sample) {
        let (name, needs, reach) = crate::frames::rule(&op);
        let outside = outside(reach, "`permission_denied`", |()| String::new());
        row(&mut out, name, form, needs, outside);
    }
    out.push_str("\n## SQS\n\n");
    table_head(&mut out, "action");
    for a in crate::sqs::actions() {
        let outside = outside(a.reach, "`AccessDenied`", |shape| {
            format!("`{shape}`, as an unknown task")
        });
        row(&mut out, a.name, a.form, a.needs, outside);
    }
    out.push_str(
        "\n## The audit log\n\n\
         The same table declares what each operation records in the audit log, under the name \
         of the caller's key (`anonymous` without keys, `sqs:<access key id>` over SQS), when \
         it changes something; the test above checks that every allowed call records nothing \
         else. The others record nothing: reads, and the producers' and consumers' traffic, \
         which the broker's own `message.*` entries tell where it matters (dead letters, \
         expiries).\n\n| operation | records |\n|---|---|\n",
    );
    for op in sluice_core::access::operations::OPERATIONS {
        if op.audit.is_empty() {
            continue;
        }
        let actions: Vec<String> = op.audit.iter().map(|a| format!("`{a}`")).collect();
        let _ = writeln!(out, "| `{}` | {} |", op.name, actions.join(", "));
    }
    out
}

#[test]
fn the_docs_show_the_tables() {
    let page = page();
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(PATH, &page).expect("write docs/permissions.md");
    }
    let written = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        written == page,
        "docs/permissions.md does not match the permission tables; run \
         SLUICE_BLESS=1 cargo test -p sluice --test permissions and commit the page"
    );
}
