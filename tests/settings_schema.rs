//! The JSON Schema of `.github/supervise.yml` (schema/supervise.schema.json)
//! says exactly what the reader accepts: every key it lists is read, every key
//! the reader knows is listed, and the commands of `permissions` are the real ones.

use std::collections::BTreeSet;
use supervise::settings;

fn schema() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/supervise.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_schema_and_the_settings_reader_name_the_same_keys() {
    let schema = schema();
    let listed: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    for key in &listed {
        settings::parse(&format!("{key}: null\n"), "supervise.yml")
            .unwrap_or_else(|e| panic!("the schema lists `{key}` but the reader refuses it: {e}"));
    }
    // The reader's own list of valid keys, from the message for a typo.
    let err = settings::parse("no_such_key: 1\n", "supervise.yml").unwrap_err();
    let known: BTreeSet<String> = err
        .split("valid keys: ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split(", ")
        .map(|k| k.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(listed, known, "schema properties vs the reader's keys");
}

#[test]
fn the_schema_permissions_name_the_real_commands() {
    let schema = schema();
    let in_schema: BTreeSet<String> = schema["properties"]["permissions"]["propertyNames"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut real: BTreeSet<String> = supervise::commands::COMMANDS
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    real.insert("default".into());
    assert_eq!(in_schema, real);
}

/// A JSON Schema type as a reader of the guide would name it.
fn type_of(p: &serde_json::Value) -> String {
    if let Some(values) = p["enum"].as_array() {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
            .collect();
        return format!("one of {}", names.join(", "));
    }
    let mut t = match p["type"].as_str().unwrap_or("any") {
        "integer" => "whole number".to_string(),
        "boolean" => "`true` or `false`".to_string(),
        "array" => format!(
            "list of {}s",
            p["items"]["type"].as_str().unwrap_or("value")
        ),
        "object" => "map".to_string(),
        other => other.to_string(),
    };
    match (p["minimum"].as_i64(), p["maximum"].as_i64()) {
        (Some(lo), Some(hi)) => t.push_str(&format!(", {lo} to {hi}")),
        (Some(lo), None) => t.push_str(&format!(", at least {lo}")),
        _ => {}
    }
    if let Some(pattern) = p["pattern"].as_str() {
        t.push_str(&format!(", matching `{pattern}`"));
    }
    t
}

/// A table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The guide's settings chapter, written from the schema alone.
fn settings_chapter(schema: &serde_json::Value) -> String {
    let mut out = String::from(
        "# Settings\n\n\
<!-- Written from schema/supervise.schema.json by tests/settings_schema.rs; \
edit the schema, then run `UPDATE_DOCS=1 cargo test --test settings_schema`. -->\n\n",
    );
    out.push_str(schema["description"].as_str().unwrap_or(""));
    out.push_str(
        "\n\nA repository keeps them in `.github/supervise.yml`; a local run reads the \
nearest `.github/supervise.yml` from the plan's directory up to the repository's \
root, and its flags win over the file. Editors that read JSON \
Schema check the file as you type with \
[`schema/supervise.schema.json`](../../schema/supervise.schema.json).\n\n\
| Key | Value | What it does |\n|---|---|---|\n",
    );
    let props = schema["properties"].as_object().unwrap();
    for (key, p) in props {
        let what = p["description"].as_str().unwrap_or("");
        out.push_str(&format!(
            "| `{key}` | {} | {} |\n",
            cell(&type_of(p)),
            cell(what)
        ));
    }
    for (key, p) in props {
        let Some(sub) = p["properties"].as_object() else {
            continue;
        };
        out.push_str(&format!(
            "\n## `{key}`\n\n{}\n\n| Key | Value | What it does |\n|---|---|---|\n",
            p["description"].as_str().unwrap_or("")
        ));
        for (k, q) in sub {
            out.push_str(&format!(
                "| `{k}` | {} | {} |\n",
                cell(&type_of(q)),
                cell(q["description"].as_str().unwrap_or("—"))
            ));
        }
    }
    if let Some(names) = props["permissions"]["propertyNames"]["enum"].as_array() {
        let names: Vec<String> = names
            .iter()
            .map(|n| format!("`{}`", n.as_str().unwrap_or("?")))
            .collect();
        out.push_str(&format!(
            "\n## `permissions`\n\n{}\n\nCommands: {}. Levels: {}.\n",
            props["permissions"]["description"].as_str().unwrap_or(""),
            names.join(", "),
            type_of(&props["permissions"]["additionalProperties"]).trim_start_matches("one of ")
        ));
    }
    out
}

/// The guide's settings chapter cannot drift from what the reader accepts:
/// it is the schema, written out (and the schema is held to the reader above).
#[test]
fn the_guides_settings_chapter_is_the_schema_written_out() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/settings.md");
    let want = settings_chapter(&schema());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/src/settings.md is not the schema written out; run `UPDATE_DOCS=1 cargo test --test settings_schema` and commit it"
    );
}

/// The notices the schema offers under `notify: events:` are the ones the
/// reader takes.
#[test]
fn the_schemas_notices_are_the_readers() {
    let schema = schema();
    let offered: Vec<String> = schema["properties"]["notify"]["properties"]["events"]["items"]
        ["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let known: Vec<String> = supervise::notify::KINDS
        .iter()
        .map(|k| supervise::notify::kind_name(*k).to_string())
        .collect();
    assert_eq!(offered, known);
}
