//! The table of the `Store` contract in `docs/architecture.md` lists exactly the methods of
//! each trait, in their order: a method added to a trait fails this test until the table
//! names it, so the documented contract cannot fall behind the code.

use std::path::Path;

/// Each trait and the file that declares it.
const TRAITS: [(&str, &str); 6] = [
    ("QueueAdmin", "admin.rs"),
    ("Messaging", "messaging.rs"),
    ("Inspection", "inspection.rs"),
    ("Redrives", "redrives.rs"),
    ("Records", "records.rs"),
    ("Schedules", "schedules.rs"),
];

/// The methods a trait declares, in order: the `fn` items one level inside `pub trait`.
fn declared(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("pub trait {name}"))
        .unwrap_or_else(|| panic!("no trait {name}"));
    let mut methods = Vec::new();
    for line in source[start..].lines().skip(1) {
        if line.starts_with('}') {
            break;
        }
        let item = line
            .strip_prefix("    async fn ")
            .or_else(|| line.strip_prefix("    fn "));
        if let Some(rest) = item {
            let end = rest.find(['(', '<']).expect("a method signature");
            methods.push(rest[..end].to_owned());
        }
    }
    methods
}

/// The methods the table's row for `name` lists, in order.
fn documented(doc: &str, name: &str) -> Vec<String> {
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{name}` |")))
        .unwrap_or_else(|| panic!("no row for {name} in docs/architecture.md"));
    let cells: Vec<&str> = row.split('|').collect();
    cells[2]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_contract_is_the_traits() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(crate_dir.join("../../docs/architecture.md"))
        .expect("docs/architecture.md");
    for (name, file) in TRAITS {
        let source = std::fs::read_to_string(crate_dir.join("src/store").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let code = declared(&source, name);
        assert!(!code.is_empty(), "{name} declares no methods?");
        assert_eq!(documented(&doc, name), code, "the table's row for {name}");
    }
}
