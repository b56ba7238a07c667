//! Scenario keys whose values are the core's names (a collective algorithm; a transport
//! kind: `transport_cfg.rs`), read and written as those names with serde's own wording for an unknown one.

use serde::de::Error;
use serde::{Deserialize, Deserializer, Serializer};

pub mod algorithm {
    use super::*;
    use gradwire_core::collective::Algorithm;

    pub fn serialize<S: Serializer>(a: &Option<Algorithm>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.serialize_some(a.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Algorithm>, D::Error> {
        let Some(name) = Option::<String>::deserialize(d)? else { return Ok(None) };
        Algorithm::from_name(&name).map(Some).ok_or_else(|| D::Error::unknown_variant(&name, Algorithm::NAMES))
    }
}
