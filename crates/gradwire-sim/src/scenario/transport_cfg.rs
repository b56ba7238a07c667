//! `[transport]`: the keys every transport shares, typed here, and every key of the
//! registered transports, read and written by the types the core's registry gives them
//! (`gradwire_core::transport::registry`): a transport added there is a scenario key here
//! without a line in this file.

use std::fmt;

use gradwire_core::transport::{registry, Key, KeyType, Kind, Value, Values};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The core's transport kinds; `transport.kind` takes their names.
pub type TransportKind = Kind;

/// The scenario's `[transport]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportCfg {
    /// Which transport (a registered name).
    pub kind: TransportKind,
    pub mss_bytes: u32,
    pub header_bytes: u32,
    pub ack_bytes: u32,
    /// Switch queue for the flows' packets (0 = highest priority); transports that pick
    /// a queue per layer ignore it.
    pub priority: u8,
    /// Share of a transfer that may be lost (push, and every non-PS flow).
    pub loss_bound: f64,
    /// Loss bound of PS pulls and of a collective's broadcast half.
    pub pull_loss_bound: f64,
    /// Every key of the registered transports.
    pub keys: Values,
}

impl Default for TransportCfg {
    fn default() -> Self {
        TransportCfg {
            kind: Kind::named("dctcp"),
            mss_bytes: 1460,
            header_bytes: 40,
            ack_bytes: 40,
            priority: 0,
            loss_bound: 0.1,
            pull_loss_bound: 0.01,
            keys: Values::new(),
        }
    }
}

/// The keys of `[transport]` this file types.
const COMMON: [&str; 7] =
    ["kind", "mss_bytes", "header_bytes", "ack_bytes", "priority", "loss_bound", "pull_loss_bound"];

/// Every key `[transport]` takes, for serde's "expected one of".
fn all_keys() -> &'static [&'static str] {
    let mut names: Vec<&'static str> = COMMON.to_vec();
    names.extend(registry::key_sets().iter().flat_map(|s| s.keys.iter().map(|k| k.name)));
    // only on an error: a few hundred bytes per refused file
    Box::leak(names.into_boxed_slice())
}

impl Serialize for TransportCfg {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", self.kind.name())?;
        m.serialize_entry("mss_bytes", &self.mss_bytes)?;
        m.serialize_entry("header_bytes", &self.header_bytes)?;
        m.serialize_entry("ack_bytes", &self.ack_bytes)?;
        m.serialize_entry("priority", &self.priority)?;
        m.serialize_entry("loss_bound", &self.loss_bound)?;
        m.serialize_entry("pull_loss_bound", &self.pull_loss_bound)?;
        for key in registry::key_sets().iter().flat_map(|s| s.keys.iter()) {
            let v = self.keys.get(key.name);
            if key.hide_default && *v == key.default {
                continue;
            }
            match v {
                Value::Absent => m.serialize_entry(key.name, &None::<f64>)?,
                Value::Bool(b) => m.serialize_entry(key.name, b)?,
                Value::Int(i) => m.serialize_entry(key.name, i)?,
                Value::Float(x) => m.serialize_entry(key.name, x)?,
                Value::Str(x) => m.serialize_entry(key.name, x.as_ref())?,
                Value::List(l) => m.serialize_entry(key.name, l)?,
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for TransportCfg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TransportVisitor)
    }
}

struct TransportVisitor;

impl<'de> Visitor<'de> for TransportVisitor {
    type Value = TransportCfg;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of transport keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TransportCfg, A::Error> {
        let mut t = TransportCfg::default();
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "kind" => t.kind = map.next_value_seed(KindSeed)?,
                "mss_bytes" => t.mss_bytes = map.next_value()?,
                "header_bytes" => t.header_bytes = map.next_value()?,
                "ack_bytes" => t.ack_bytes = map.next_value()?,
                "priority" => t.priority = map.next_value()?,
                "loss_bound" => t.loss_bound = map.next_value()?,
                "pull_loss_bound" => t.pull_loss_bound = map.next_value()?,
                other => match registry::key(other) {
                    Some(key) => {
                        let v = map.next_value_seed(KeySeed(key))?;
                        t.keys.set(key.name, v);
                    }
                    // refused inside the value, so the error's path names the key
                    None => map.next_value_seed(Unknown(other))?,
                },
            }
        }
        Ok(t)
    }
}

/// `transport.kind`: a registered name, refused in serde's words.
struct KindSeed;

impl<'de> DeserializeSeed<'de> for KindSeed {
    type Value = Kind;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        let name = String::deserialize(d)?;
        Kind::from_name(&name).ok_or_else(|| {
            let names: &'static [&'static str] = Box::leak(Kind::names().into_boxed_slice());
            de::Error::unknown_variant(&name, names)
        })
    }
}

/// A registered key's value, read by its type.
struct KeySeed(&'static Key);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let key = self.0;
        Ok(match key.ty {
            KeyType::Bool => Value::Bool(bool::deserialize(d)?),
            KeyType::U32 => Value::Int(u32::deserialize(d)? as u64),
            KeyType::F64 if key.optional => Option::<f64>::deserialize(d)?.map_or(Value::Absent, Value::Float),
            KeyType::F64 => Value::Float(f64::deserialize(d)?),
            KeyType::List => Value::List(Vec::<u64>::deserialize(d)?),
            KeyType::Choice(names) => {
                let name = String::deserialize(d)?;
                match names.iter().find(|&&n| n == name) {
                    Some(n) => Value::Str((*n).into()),
                    None => return Err(de::Error::unknown_variant(&name, names)),
                }
            }
        })
    }
}

/// A key no transport registered.
struct Unknown<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for Unknown<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        de::IgnoredAny::deserialize(d)?;
        Err(de::Error::unknown_field(self.0, all_keys()))
    }
}

/// The rows of docs/scenarios.md's `[transport]` tables that the registry writes: the
/// `kind` row, then one table per key set, headed by the transports that read it.
pub fn docs_tables() -> String {
    let mut out = String::new();
    let kinds: Vec<String> = Kind::names().iter().map(|n| format!("`\"{n}\"`")).collect();
    let about: Vec<String> = Kind::all().iter().map(|k| format!("`{}`: {}", k.name(), k.spec().about())).collect();
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    out.push_str(&format!(
        "| `kind` | {} | `\"dctcp\"` | The transport. {} |\n\n",
        kinds.join(" \\| "),
        about.join(" ")
    ));
    for set in registry::key_sets() {
        let readers: Vec<String> = registry::readers(set).iter().map(|n| format!("`{n}`")).collect();
        out.push_str(&format!("Read by {} (`{}` keys):\n\n", readers.join(", "), set.name));
        out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
        for k in set.keys {
            out.push_str(&format!("| `{}` | {} | {} | {} |\n", k.name, k.doc_type, k.doc_default, k.doc));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- generated transport keys: begin -->\n";
    const END: &str = "<!-- generated transport keys: end -->";

    /// docs/scenarios.md holds the registry's tables; `GRADWIRE_BLESS_DOCS=1` rewrites them.
    #[test]
    fn docs_tables_are_the_registrys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scenarios.md");
        let Ok(doc) = std::fs::read_to_string(&path) else { return };
        let (a, b) = (doc.find(BEGIN).expect("begin marker") + BEGIN.len(), doc.find(END).expect("end marker"));
        let want = docs_tables();
        if std::env::var_os("GRADWIRE_BLESS_DOCS").is_some() {
            std::fs::write(&path, format!("{}{want}{}", &doc[..a], &doc[b..])).unwrap();
        } else {
            assert!(doc[a..b] == want, "docs/scenarios.md's transport tables are stale: GRADWIRE_BLESS_DOCS=1 cargo test -p gradwire-sim docs_tables");
        }
    }

    #[test]
    fn a_transport_table_round_trips_and_leaves_defaults_out() {
        let mut t = TransportCfg::default();
        t.keys.set("tcp_sack", Value::Bool(true));
        t.keys.set("pfabric_rto_us", Value::Float(5.0));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["tcp_sack"], serde_json::Value::Bool(true));
        assert!(json.get("tcp_rack_tlp").is_none(), "hidden at its default");
        assert_eq!(json["rto_initial_us"], serde_json::Value::Null, "written, absent");
        let back: TransportCfg = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        let e = serde_json::from_str::<TransportCfg>(r#"{"tcp_sackk": true}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `tcp_sackk`, expected one of"), "{e}");
    }
}
