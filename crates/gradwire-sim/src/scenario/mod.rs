//! Scenario files: TOML in, validated [`Scenario`] out.
//!
//! Every error names the offending key and value (`topology.spines = -1: ...`). Overrides
//! (`--set key=value`) and sweeps (`[sweep]` of dotted keys to lists) are applied to the
//! TOML tree before it is typed, so they get exactly the same checks as the file.

mod error;
mod names;
mod preset;
mod schema;
mod transport_cfg;
mod validate;

pub use error::ScenarioError;
pub use schema::*;
pub use transport_cfg::docs_tables as transport_docs_tables;

/// One concrete simulation of a scenario file: a point of its sweep.
#[derive(Debug, Clone)]
pub struct Run {
    /// Directory-safe name: the scenario name, or `key=value,...` of the sweep point.
    pub name: String,
    /// The sweep point as (dotted key, value) pairs; empty without a sweep.
    pub params: Vec<(String, String)>,
    pub scenario: Scenario,
}

/// One point of a scenario file's sweep before it is typed: the simulator types it into a
/// [`Run`]; the emulator's front end reads its `[job]` from the same tree, so `--set` and
/// sweeps mean one thing in both.
#[derive(Debug, Clone)]
pub struct Point {
    /// The sweep point: dotted key, the value set there, and its label (see [`Point::name`]).
    pub params: Vec<(String, toml::Value, String)>,
    /// The whole scenario with the overrides and this point's values applied.
    pub tree: toml::Table,
}

impl Point {
    /// `key=label,...` of the sweep point (last key segment only), `None` without a sweep.
    pub fn name(&self) -> Option<String> {
        (!self.params.is_empty()).then(|| {
            self.params
                .iter()
                .map(|(k, _, label)| format!("{}={}", k.rsplit('.').next().unwrap_or(k), sanitize(label)))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}

/// Parse a scenario file, apply `key=value` overrides and expand its `[sweep]`, without
/// typing: one [`Point`] per combination of the sweep's axes, in order.
pub fn expand(text: &str, overrides: &[String]) -> Result<Vec<Point>, ScenarioError> {
    let mut root: toml::Table =
        toml::from_str(text).map_err(|e| ScenarioError::new("", format!("not valid TOML: {e}")))?;
    for ov in overrides {
        apply_override(&mut root, ov)?;
    }
    let sweep = match root.remove("sweep") {
        None => Vec::new(),
        Some(toml::Value::Table(t)) => sweep_axes(t)?,
        Some(v) => return Err(ScenarioError::new("sweep", format!("must be a table of key = [values], got {v}"))),
    };
    let mut points = Vec::new();
    for combo in cartesian(&sweep) {
        let mut tree = root.clone();
        let mut params = Vec::new();
        for (key, index, value) in combo {
            match value {
                // a bundle: several keys that vary together, e.g. a scheme's transport,
                // switch policy and routing; `name` labels the point
                toml::Value::Table(bundle) => {
                    for (k, v) in bundle.iter().filter(|(k, _)| k.as_str() != "name") {
                        set_path(&mut tree, k, v.clone())
                            .map_err(|e| ScenarioError::new(format!("sweep.{key}"), e.to_string()))?;
                    }
                    let name = bundle.get("name").map(display_value).ok_or_else(|| {
                        ScenarioError::new(format!("sweep.{key}"), "each table in a bundled sweep needs a `name`")
                    })?;
                    params.push((key, value.clone(), name));
                }
                _ => {
                    set_path(&mut tree, &key, value.clone())?;
                    params.push((key, value.clone(), label(value, index)));
                }
            }
        }
        points.push(Point { params, tree });
    }
    Ok(points)
}

/// Parse a scenario file, apply `key=value` overrides, expand its `[sweep]`, and type and
/// validate every run.
pub fn load(text: &str, overrides: &[String]) -> Result<Vec<Run>, ScenarioError> {
    expand(text, overrides)?
        .into_iter()
        .map(|point| {
            let name = point.name();
            let scenario = from_table(point.tree)?;
            let name = name.unwrap_or_else(|| sanitize(&scenario.name));
            let params = point.params.into_iter().map(|(k, _, label)| (k, label)).collect();
            Ok(Run { name, params, scenario })
        })
        .collect()
}

/// Type and validate one run's TOML tree.
pub fn from_table(mut tree: toml::Table) -> Result<Scenario, ScenarioError> {
    preset::apply(&mut tree)?;
    let value = toml::Value::Table(tree.clone());
    let scenario: Scenario = serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { String::new() } else { key };
        let shown = lookup(&tree, &key).map(|v| format!(" (got {v})")).unwrap_or_default();
        ScenarioError::new(key, format!("{}{shown}", error::plain_type_names(&e.inner().to_string())))
    })?;
    scenario.validate()?;
    Ok(scenario)
}

/// Set one `key=value` override (a dotted key; a TOML value, or else a bare string) in a
/// scenario's TOML tree, making the tables on its path.
pub fn apply_override(root: &mut toml::Table, ov: &str) -> Result<(), ScenarioError> {
    let (key, value) = parse_override(ov)?;
    set_path(root, &key, value)
}

fn parse_override(ov: &str) -> Result<(String, toml::Value), ScenarioError> {
    let Some((key, raw)) = ov.split_once('=') else {
        return Err(ScenarioError::new("", format!("override `{ov}` is not key=value")));
    };
    let key = key.trim().to_string();
    let raw = raw.trim();
    // A TOML literal if it is one (numbers, booleans, arrays, quoted strings), else a bare string.
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    Ok((key, value))
}

fn set_path(root: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), ScenarioError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ScenarioError::new(key, "is not a valid dotted key"));
    }
    let mut table = root;
    for part in &parts[..parts.len() - 1] {
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            other => return Err(ScenarioError::new(key, format!("`{part}` is {other}, not a table"))),
        };
    }
    table.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

fn lookup<'a>(root: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut cur = root.get(parts.next()?)?;
    for part in parts {
        cur = match cur {
            toml::Value::Table(t) => t.get(part)?,
            toml::Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn sweep_axes(t: toml::Table) -> Result<Vec<(String, Vec<toml::Value>)>, ScenarioError> {
    let mut axes = Vec::new();
    for (k, v) in t {
        match v {
            toml::Value::Array(vals) if !vals.is_empty() => axes.push((k, vals)),
            other => {
                return Err(ScenarioError::new(format!("sweep.{k}"), format!("must be a non-empty list, got {other}")))
            }
        }
    }
    Ok(axes)
}

/// Every combination of the axes' values: (key, index in its axis, value) per axis.
fn cartesian(axes: &[(String, Vec<toml::Value>)]) -> Vec<Vec<(String, usize, &toml::Value)>> {
    let mut points: Vec<Vec<(String, usize, &toml::Value)>> = vec![Vec::new()];
    for (key, vals) in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                vals.iter().enumerate().map(move |(i, v)| {
                    let mut q = p.clone();
                    q.push((key.clone(), i, v));
                    q
                })
            })
            .collect();
    }
    points
}

/// A sweep value's label: a scalar as written, a list of flows by their congestion
/// controls (`cubic+bbr`), any other list by its index in the axis (`#1`).
fn label(v: &toml::Value, index: usize) -> String {
    match v {
        toml::Value::Array(items) => {
            let ccs: Option<Vec<&str>> =
                items.iter().map(|f| f.as_table().and_then(|t| t.get("cc")).and_then(|c| c.as_str())).collect();
            match ccs {
                Some(ccs) if !ccs.is_empty() => ccs.join("+"),
                _ => format!("#{index}"),
            }
        }
        other => display_value(other),
    }
}

fn display_value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.=#+".contains(c) { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[workload]\nkind = \"incast\"\nsenders = 4\nflow_bytes = 1000\n";

    fn err(text: &str, ov: &[&str]) -> ScenarioError {
        let ov: Vec<String> = ov.iter().map(|s| s.to_string()).collect();
        load(text, &ov).unwrap_err()
    }

    #[test]
    fn minimal_file_gets_dlcp_defaults() {
        let runs = load(MIN, &[]).unwrap();
        assert_eq!(runs.len(), 1);
        let s = &runs[0].scenario;
        assert_eq!(s.host_count(), 144);
        assert_eq!(s.switch.ecn_threshold_packets, 65);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = err(&format!("{MIN}bogus = 1\n"), &[]);
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = err(&format!("[topology]\nspinez = 3\n{MIN}"), &[]);
        assert!(e.to_string().contains("spinez"), "{e}");
    }

    #[test]
    fn wrong_type_names_key_and_value() {
        let e = err(&format!("[topology]\nspines = \"four\"\n{MIN}"), &[]);
        assert_eq!(e.key, "topology.spines");
        assert!(e.message.contains("four"), "{e}");
    }

    #[test]
    fn negative_rate_and_out_of_range_host() {
        let e = err(MIN, &["topology.host_link_gbps=-100"]);
        assert_eq!(e.key, "topology.host_link_gbps");
        assert!(e.message.contains("-100"), "{e}");
        let e = err(MIN, &["workload.receiver=144"]);
        assert_eq!(e.key, "workload.receiver");
        assert!(e.message.contains("144"), "{e}");
    }

    #[test]
    fn expand_labels_lists_and_keeps_untyped_tables() {
        // the emulator's [job] is not the simulator's: expand leaves it to the caller
        let text = "[job]\nkind = \"flows\"\n[sweep]\n\"job.flows\" = [[{ src = 0, dst = 1, cc = \"cubic\" }, \
                    { src = 1, dst = 0, cc = \"bbr\" }], [{ src = 0, dst = 1 }]]\n\"job.senders\" = [[1], [1, 2]]\n";
        let points = expand(text, &["topology.leaves=2".into()]).unwrap();
        let names: Vec<_> = points.iter().map(|p| p.name().unwrap()).collect();
        assert_eq!(
            names,
            ["flows=cubic+bbr,senders=#0", "flows=cubic+bbr,senders=#1", "flows=#1,senders=#0", "flows=#1,senders=#1"]
        );
        let job = points[3].tree["job"].as_table().unwrap();
        assert_eq!(job["senders"].as_array().unwrap().len(), 2);
        assert_eq!(points[0].tree["topology"]["leaves"].as_integer(), Some(2));
        assert!(expand("[sweep]\nx = []\n", &[]).unwrap_err().to_string().contains("sweep.x"));
        assert_eq!(expand("", &["sweep={}".into()]).unwrap()[0].name(), None);
    }

    #[test]
    fn overrides_and_sweeps_expand() {
        let text =
            format!("{MIN}[sweep]\n\"transport.kind\" = [\"newreno\", \"dctcp\"]\n\"workload.senders\" = [2, 8]\n");
        let runs = load(&text, &["seed=7".into()]).unwrap();
        assert_eq!(runs.len(), 4);
        assert_eq!(runs[0].name, "kind=newreno,senders=2");
        assert!(runs.iter().all(|r| r.scenario.seed == 7));
        assert_eq!(runs[3].scenario.transport.kind, TransportKind::named("dctcp"));
        assert_eq!(runs[3].scenario.workload.senders, Some(8));
    }

    #[test]
    fn bundled_sweep_sets_several_keys_per_point() {
        let text = format!(
            "{MIN}[sweep]\nscheme = [{{ name = \"reno\", \"transport.kind\" = \"newreno\" }}, \
             {{ name = \"spray-dctcp\", \"transport.kind\" = \"dctcp\", \"routing.mode\" = \"spray\" }}]\n"
        );
        let runs = load(&text, &[]).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].name, "scheme=spray-dctcp");
        assert_eq!(runs[1].params, vec![("scheme".to_string(), "spray-dctcp".to_string())]);
        assert_eq!(runs[1].scenario.routing.mode, RoutingMode::Spray);
        assert_eq!(runs[0].scenario.transport.kind, TransportKind::named("newreno"));
        let e = load(&format!("{MIN}[sweep]\nscheme = [{{ \"transport.kind\" = \"dctcp\" }}]\n"), &[]).unwrap_err();
        assert_eq!(e.key, "sweep.scheme");
    }

    #[test]
    fn bad_override_value_is_rejected_with_key() {
        let e = err(MIN, &["transport.kind=cubic"]);
        assert_eq!(e.key, "transport.kind");
        assert!(e.message.contains("cubic"), "{e}");
    }
}
