//! Per-layer DNN profiles (gradient bytes, backward timing), generated from the real
//! torchvision / torch.nn model definitions by `tools/dnn_profiles/generate.py` and
//! embedded here so the simulator needs no torch.

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
            $(($name, include_str!(concat!("../../../python/gradwire/models/", $name, ".json")))),*
        ];
    };
}

profiles!("alexnet", "inception_v3", "resnet18", "resnet50", "transformer", "vgg16");

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
}
