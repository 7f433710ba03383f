//! What `explain` names of an SGLang server launch's fingerprint inputs:
//! its argument groups by option, and the rest.

use std::collections::HashMap;

use serde_json::Value;

pub type Items = Vec<(String, Option<String>)>;

/// The named items of a canonical launch, in its order: argument groups by
/// option (repeats of an option, in an ordered launch, joined by ` ; `),
/// and the rest: interpreter options, model type, config state, models.
pub fn launch_items(launch: &Value) -> (Items, Items) {
    let mut out: Items = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for g in launch["args"].as_array().into_iter().flatten() {
        let tokens = strings(g);
        let Some((head, values)) = tokens.split_first() else {
            continue;
        };
        let value = (!values.is_empty()).then(|| values.join(" "));
        match index.get(head) {
            Some(&i) => {
                let prev = out[i].1.take().unwrap_or_default();
                out[i].1 = Some(format!("{prev} ; {}", value.unwrap_or_default()));
            }
            None => {
                index.insert(head.clone(), out.len());
                out.push((head.clone(), value));
            }
        }
    }
    let mut rest: Items = Vec::new();
    if let Some(p) = launch.get("python") {
        rest.push(("python options".into(), Some(strings(p).join(" "))));
    }
    if let Some(t) = launch.get("model_type").and_then(Value::as_str) {
        rest.push(("sglang serve --model-type".into(), Some(t.to_string())));
    }
    if let Some(c) = launch.get("config").and_then(Value::as_str) {
        rest.push(("config file".into(), Some(c.to_string())));
    }
    for (opt, desc) in launch["models"].as_object().into_iter().flatten() {
        rest.push((
            format!("model of {opt}"),
            Some(crate::launch::model::explain(desc)),
        ));
    }
    (out, rest)
}

/// The strings of a JSON array (none for anything else).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
