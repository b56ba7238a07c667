//! Per-layer DNN profiles (gradient bytes, backward timing), generated from the real
//! torchvision / torch.nn model definitions by `tools/dnn_profiles/generate.py` into this
//! crate's `models/` and embedded here, so the simulator needs no torch; Python reads the
//! same text through the extension (`gradwire.models`).

use crate::scenario::ScenarioError;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
pub struct Layer {
    pub index: u32,
    pub name: String,
    pub bytes: u64,
    /// Seconds after backward starts when this layer's gradient is ready.
    pub ready_offset_s: f64,
    /// This layer's forward and backward compute time, seconds (the per-layer compute that
    /// `bytesched` overlaps with communication).
    #[serde(default)]
    pub fwd_time_s: f64,
    #[serde(default)]
    pub bwd_time_s: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ModelProfile {
    pub model: String,
    /// Samples per worker per iteration that the compute times are for.
    #[serde(default = "d_batch")]
    pub batch_size: u32,
    pub total_bytes: u64,
    pub forward_time_s: f64,
    pub backward_time_s: f64,
    /// Forward order: index 0 is the input-side layer.
    pub layers: Vec<Layer>,
}

fn d_batch() -> u32 {
    32
}

macro_rules! profiles {
    ($($name:literal),*) => {
        /// (name, JSON) of every embedded profile.
        pub const PROFILES: &[(&str, &str)] = &[
            $(($name, include_str!(concat!("../models/", $name, ".json")))),*
        ];
    };
}

profiles!("alexnet", "inception_v3", "resnet18", "resnet50", "transformer", "vgg16");

/// (name, JSON) of every embedded importance profile: per layer, the share of segments
/// dlcp.md's median rule tags important in real gradients
/// (`tools/dnn_profiles/grad_importance.py`).
const IMPORTANCE: &[(&str, &str)] = &[
    ("inception_v3", include_str!("../models/importance/inception_v3.json")),
    ("resnet18", include_str!("../models/importance/resnet18.json")),
    ("resnet50", include_str!("../models/importance/resnet50.json")),
];

#[derive(Deserialize)]
struct ImportanceLayer {
    index: u32,
    important_share: f64,
}

#[derive(Deserialize)]
struct ImportanceProfile {
    layers: Vec<ImportanceLayer>,
}

/// Per layer (forward order, as [`ModelProfile::layers`]), the share of a layer's
/// segments the median rule tags important; refused under `key` for a model without one.
pub fn important_shares(name: &str, key: &str) -> Result<Vec<f64>, ScenarioError> {
    let known = || IMPORTANCE.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let json = IMPORTANCE.iter().find(|(n, _)| *n == name).map(|(_, j)| *j).ok_or_else(|| {
        ScenarioError::new(key, format!("no gradient-magnitude profile for model `{name}` (known: {})", known()))
    })?;
    let p: ImportanceProfile = serde_json::from_str(json)
        .map_err(|e| ScenarioError::new(key, format!("importance profile `{name}` is corrupt: {e}")))?;
    let layers = load(name)?.layers.len();
    let in_order = p.layers.iter().enumerate().all(|(i, l)| l.index as usize == i);
    if p.layers.len() != layers || !in_order || p.layers.iter().any(|l| !(0.0..=1.0).contains(&l.important_share)) {
        return Err(ScenarioError::new(key, format!("importance profile `{name}` does not match its {layers} layers")));
    }
    Ok(p.layers.iter().map(|l| l.important_share).collect())
}

pub fn names() -> Vec<&'static str> {
    PROFILES.iter().map(|(n, _)| *n).collect()
}

pub fn load(name: &str) -> Result<ModelProfile, ScenarioError> {
    let json = PROFILES.iter().find(|(n, _)| *n == name).map(|(_, j)| *j).ok_or_else(|| {
        ScenarioError::new("workload.model", format!("unknown model `{name}` (known: {})", names().join(", ")))
    })?;
    serde_json::from_str(json)
        .map_err(|e| ScenarioError::new("workload.model", format!("profile `{name}` is corrupt: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_parses_and_adds_up() {
        for name in names() {
            let p = load(name).unwrap();
            assert_eq!(p.layers.iter().map(|l| l.bytes).sum::<u64>(), p.total_bytes, "{name}");
            // backward runs back to front: the last layer is ready first
            let first = p.layers.first().unwrap().ready_offset_s;
            let last = p.layers.last().unwrap().ready_offset_s;
            assert!(last <= first, "{name}");
        }
        assert!(load("resnet51").unwrap_err().message.contains("resnet50"));
    }

    #[test]
    fn importance_profiles_match_their_models_and_are_not_a_flat_half() {
        for (name, _) in IMPORTANCE {
            let shares = important_shares(name, "k").unwrap();
            let p = load(name).unwrap();
            let by_bytes =
                shares.iter().zip(&p.layers).map(|(s, l)| s * l.bytes as f64).sum::<f64>() / p.total_bytes as f64;
            // the median rule compares a packet's *mean* |g| with the median |g|: more than
            // half of a layer's packets pass it, and the share varies from layer to layer
            assert!(by_bytes > 0.5 && by_bytes < 1.0, "{name}: {by_bytes}");
            assert!(shares.iter().any(|&s| s < 0.5) && shares.iter().any(|&s| s > 0.9), "{name}");
        }
        let e = important_shares("vgg16", "transport.importance").unwrap_err();
        assert_eq!(e.key, "transport.importance");
        assert!(e.message.contains("resnet50"), "{e}");
    }
}
