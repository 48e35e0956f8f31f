//! Keeps `docs/conformance/*.md` true: each table's status line counts its rows correctly, and
//! every test a row cites exists (the file, and a `fn` of that name in it).
//!
//! A row's last cell is its test: a cited test in backticks (`path/file.rs::…::name`) proves it,
//! also after a short label that says which transport, face or side it covers (`mesh: `…``);
//! `partial: …` cites a building block while the protocol's use of it is still to come; anything
//! else (`not yet — …`) is not proven. A cited name is a `fn` in the file, generic ones (a store
//! suite's checks, run against every backend) included.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

#[derive(Default, Debug, PartialEq)]
struct Counts {
    rules: usize,
    proven: usize,
    partial: usize,
}

/// The rows of a table: lines that start with `| <id> |` where the id has a letter and a dash.
fn rows(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| {
        let id = l
            .strip_prefix("| ")
            .and_then(|r| r.split(" |").next())
            .unwrap_or("");
        id.contains('-')
            && id.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && !id.contains(' ')
    })
}

fn last_cell(row: &str) -> &str {
    row.trim_end()
        .trim_end_matches('|')
        .rsplit(" | ")
        .next()
        .unwrap_or("")
        .trim()
}

/// Every `path.rs::…::name` cited in a cell.
fn citations(cell: &str) -> Vec<(String, String)> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|c| {
            let (path, rest) = c.split_once(".rs::")?;
            let name = rest.rsplit("::").next()?;
            Some((format!("{path}.rs"), name.to_string()))
        })
        .collect()
}

/// Whether `cell` opens with a label of a few lowercase words and a colon, then a citation:
/// `mesh, each way: `…``.
fn labelled(cell: &str) -> bool {
    cell.split_once(": `").is_some_and(|(label, _)| {
        !label.is_empty()
            && label.len() <= 80
            && !label.starts_with("partial")
            && !label.starts_with("not ")
            && !label.contains('`')
            && label.starts_with(|c: char| c.is_ascii_lowercase())
    })
}

#[test]
fn conformance_tables_count_their_rows_and_cite_tests_that_exist() {
    let dir = root().join("docs/conformance");
    let mut problems = Vec::new();
    let mut tables = 0;
    for entry in fs::read_dir(&dir).expect("docs/conformance exists") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        tables += 1;
        let text = fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut counted = Counts::default();
        for row in rows(&text) {
            counted.rules += 1;
            let cell = last_cell(row);
            if cell.starts_with('`') || labelled(cell) {
                counted.proven += 1;
            } else if cell.starts_with("partial") {
                counted.partial += 1;
            }
            for (file, test) in citations(cell) {
                let source = fs::read_to_string(root().join(&file)).unwrap_or_default();
                if !source.contains(&format!("fn {test}("))
                    && !source.contains(&format!("fn {test}<"))
                {
                    problems.push(format!(
                        "{name}: cites {file}::{test}, which does not exist"
                    ));
                }
            }
        }
        let status = text
            .lines()
            .find(|l| l.starts_with("Status:"))
            .unwrap_or("");
        let want = if counted.partial > 0 {
            format!(
                "Status: {} rules, {} proven, {} partial",
                counted.rules, counted.proven, counted.partial
            )
        } else {
            format!("Status: {} rules, {} proven", counted.rules, counted.proven)
        };
        if status != want {
            problems.push(format!(
                "{name}: status line says {status:?}, the rows say {want:?}"
            ));
        }
    }
    assert_eq!(tables, 5, "one table per protocol");
    assert!(
        problems.is_empty(),
        "conformance tables are not true:\n{}",
        problems.join("\n")
    );
}
