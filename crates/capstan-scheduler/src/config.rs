//! The scheduler's configuration file (`--config`): upstream's `KubeSchedulerConfiguration`
//! (`kubescheduler.config.k8s.io/v1`) for what this scheduler does — profiles with their
//! scheduler names, plugins enabled, disabled and weighted per extension point or through
//! `multiPoint`, `pluginConfig` arguments, and `percentageOfNodesToScore`.
//!
//! Plugins are merged as upstream merges them: the default set (upstream's `multiPoint`
//! defaults with their weights) plus what the profile enables, minus what it disables (`*`
//! disables every default); a plugin enabled at one extension point runs there before the
//! `multiPoint` ones.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::framework::{Framework, Plugin, Point, Weighted};
use crate::plugins::{self, volume_binding};

/// The scheduler name of the default profile.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Upstream's default plugins (`multiPoint`), in order, with score weights.
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not YAML or JSON of the expected shape.
    #[error("decoding the scheduler configuration: {0}")]
    Decode(String),
    /// The file is of another kind or version.
    #[error(
        "unsupported scheduler configuration {0}: expected apiVersion \
         kubescheduler.config.k8s.io/v1, kind KubeSchedulerConfiguration"
    )]
    Kind(String),
    /// A plugin name is unknown.
    #[error("profiles[{profile}].plugins: {name:?} does not exist")]
    UnknownPlugin {
        /// The profile index.
        profile: usize,
        /// The plugin name.
        name: String,
    },
    /// A plugin's arguments are invalid.
    #[error("profiles[{profile}].pluginConfig[{name}]: {message}")]
    Args {
        /// The profile index.
        profile: usize,
        /// The plugin name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Something else is invalid (duplicate scheduler names, a bad percentage).
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    api_version: Option<String>,
    kind: Option<String>,
    percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    profiles: Vec<RawProfile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProfile {
    scheduler_name: Option<String>,
    percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    plugins: RawPlugins,
    #[serde(default)]
    plugin_config: Vec<RawPluginConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPlugins {
    #[serde(default)]
    multi_point: RawPluginSet,
    #[serde(default)]
    pre_filter: RawPluginSet,
    #[serde(default)]
    filter: RawPluginSet,
    #[serde(default)]
    post_filter: RawPluginSet,
    #[serde(default)]
    pre_score: RawPluginSet,
    #[serde(default)]
    score: RawPluginSet,
}

#[derive(Debug, Default, Deserialize)]
struct RawPluginSet {
    #[serde(default)]
    enabled: Vec<RawPlugin>,
    #[serde(default)]
    disabled: Vec<RawPlugin>,
}

#[derive(Debug, Deserialize)]
struct RawPlugin {
    name: String,
    #[serde(default)]
    weight: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct RawPluginConfig {
    name: String,
    #[serde(default)]
    args: Option<serde_json::Value>,
}

/// The parsed configuration: one framework per profile.
#[derive(Clone, Debug)]
pub struct Config {
    /// The profiles, each answering for its scheduler name.
    pub profiles: Vec<Framework>,
}

impl Config {
    /// Upstream's default: one `default-scheduler` profile with the default plugins.
    pub fn default_config() -> Config {
        match Config::from_raw(RawConfig::default()) {
            Ok(config) => config,
            // The defaults always build; an empty profile list keeps the scheduler idle.
            Err(_) => Config {
                profiles: Vec::new(),
            },
        }
    }

    /// Parses a configuration file (YAML or JSON).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let value: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?;
        let raw: RawConfig =
            serde_json::from_value(value).map_err(|e| ConfigError::Decode(e.to_string()))?;
        let api_version = raw.api_version.as_deref().unwrap_or_default();
        let kind = raw.kind.as_deref().unwrap_or_default();
        if api_version != "kubescheduler.config.k8s.io/v1" || kind != "KubeSchedulerConfiguration" {
            return Err(ConfigError::Kind(format!("{api_version}/{kind}")));
        }
        Config::from_raw(raw)
    }

    fn from_raw(mut raw: RawConfig) -> Result<Config, ConfigError> {
        if raw.profiles.is_empty() {
            raw.profiles.push(RawProfile::default());
        }
        check_percentage(raw.percentage_of_nodes_to_score, "percentageOfNodesToScore")?;
        let mut names = HashSet::new();
        let mut profiles = Vec::new();
        for (i, profile) in raw.profiles.into_iter().enumerate() {
            let framework =
                build_profile(i, profile, raw.percentage_of_nodes_to_score.unwrap_or(0))?;
            if !names.insert(framework.scheduler_name.clone()) {
                return Err(ConfigError::Invalid(format!(
                    "profiles[{i}].schedulerName: Duplicate value: {:?}",
                    framework.scheduler_name
                )));
            }
            profiles.push(framework);
        }
        Ok(Config { profiles })
    }

    /// The profile for a scheduler name.
    pub fn profile(&self, scheduler_name: &str) -> Option<&Framework> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }
}

fn check_percentage(value: Option<u32>, field: &str) -> Result<(), ConfigError> {
    match value {
        Some(v) if v > 100 => Err(ConfigError::Invalid(format!(
            "{field}: Invalid value: {v}: not in valid range [0-100]"
        ))),
        _ => Ok(()),
    }
}

/// Plugins at one extension point with their configured weights.
type WeightedList = Vec<(Arc<dyn Plugin>, i64)>;

fn build_profile(
    index: usize,
    raw: RawProfile,
    global_percentage: u32,
) -> Result<Framework, ConfigError> {
    check_percentage(
        raw.percentage_of_nodes_to_score,
        &format!("profiles[{index}].percentageOfNodesToScore"),
    )?;
    let args: BTreeMap<String, serde_json::Value> = raw
        .plugin_config
        .into_iter()
        .filter_map(|c| c.args.map(|a| (c.name, a)))
        .collect();
    // The multiPoint set: defaults (unless disabled) then the profile's own.
    let disabled_all = |set: &RawPluginSet| set.disabled.iter().any(|p| p.name == "*");
    let disabled = |set: &RawPluginSet, name: &str| set.disabled.iter().any(|p| p.name == name);
    let mut multi: Vec<(String, i64)> = Vec::new();
    if !disabled_all(&raw.plugins.multi_point) {
        for (name, weight) in DEFAULT_PLUGINS {
            if !disabled(&raw.plugins.multi_point, name) {
                multi.push(((*name).to_owned(), *weight));
            }
        }
    }
    for p in &raw.plugins.multi_point.enabled {
        let weight = p.weight.unwrap_or(0);
        match multi.iter_mut().find(|(n, _)| *n == p.name) {
            Some(entry) => entry.1 = weight.max(entry.1),
            None => multi.push((p.name.clone(), weight)),
        }
    }
    // Build each plugin once.
    let mut built: BTreeMap<String, Option<Arc<dyn Plugin>>> = BTreeMap::new();
    let mut get = |name: &str| -> Result<Option<Arc<dyn Plugin>>, ConfigError> {
        if let Some(plugin) = built.get(name) {
            return Ok(plugin.clone());
        }
        let plugin = match plugins::build(name, args.get(name)) {
            Some(Ok(plugin)) => Some(plugin),
            Some(Err(message)) => {
                return Err(ConfigError::Args {
                    profile: index,
                    name: name.to_owned(),
                    message,
                });
            }
            None if plugins::ACCEPTED_WITHOUT_EFFECT.contains(&name) => None,
            None => {
                return Err(ConfigError::UnknownPlugin {
                    profile: index,
                    name: name.to_owned(),
                });
            }
        };
        built.insert(name.to_owned(), plugin.clone());
        Ok(plugin)
    };
    let mut point_list = |set: &RawPluginSet, point: Point| -> Result<WeightedList, ConfigError> {
        let mut out: WeightedList = Vec::new();
        for p in &set.enabled {
            if let Some(plugin) = get(&p.name)?
                && plugin.points().contains(&point)
                && !out.iter().any(|(q, _)| q.name() == plugin.name())
            {
                out.push((plugin, p.weight.unwrap_or(0)));
            }
        }
        if !disabled_all(set) {
            for (name, weight) in &multi {
                if disabled(set, name) {
                    continue;
                }
                if let Some(plugin) = get(name)?
                    && plugin.points().contains(&point)
                    && !out.iter().any(|(q, _)| q.name() == plugin.name())
                {
                    out.push((plugin, *weight));
                }
            }
        }
        Ok(out)
    };
    let plugins_only =
        |list: WeightedList| -> Vec<Arc<dyn Plugin>> { list.into_iter().map(|(p, _)| p).collect() };
    let pre_filter = plugins_only(point_list(&raw.plugins.pre_filter, Point::PreFilter)?);
    let filter = plugins_only(point_list(&raw.plugins.filter, Point::Filter)?);
    let post_filter = plugins_only(point_list(&raw.plugins.post_filter, Point::PostFilter)?);
    let pre_score = plugins_only(point_list(&raw.plugins.pre_score, Point::PreScore)?);
    let score = point_list(&raw.plugins.score, Point::Score)?
        .into_iter()
        .map(|(plugin, weight)| Weighted {
            plugin,
            weight: if weight == 0 { 1 } else { weight },
        })
        .collect();
    // The scheduler binds the volumes VolumeBinding found for the chosen node.
    let volume_binding = if filter.iter().any(|p| p.name() == volume_binding::NAME) {
        let args = args.get(volume_binding::NAME);
        let plugin = volume_binding::VolumeBinding::from_args(args).map_err(|message| {
            ConfigError::Args {
                profile: index,
                name: volume_binding::NAME.to_owned(),
                message,
            }
        })?;
        Some(plugin.bind_timeout)
    } else {
        None
    };
    Ok(Framework {
        scheduler_name: raw
            .scheduler_name
            .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_owned()),
        pre_filter,
        filter,
        post_filter,
        pre_score,
        score,
        percentage_of_nodes_to_score: raw
            .percentage_of_nodes_to_score
            .unwrap_or(global_percentage),
        volume_bind_timeout: volume_binding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(plugins: &[Arc<dyn Plugin>]) -> Vec<&'static str> {
        plugins.iter().map(|p| p.name()).collect()
    }

    #[test]
    fn the_default_profile_has_upstreams_plugins() {
        let config = Config::default_config();
        let profile = config.profile(DEFAULT_SCHEDULER_NAME);
        let Some(profile) = profile else {
            panic!("no default profile");
        };
        assert_eq!(
            names(&profile.filter)[..6],
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit"
            ]
        );
        let weights: Vec<(&str, i64)> = profile
            .score
            .iter()
            .map(|w| (w.plugin.name(), w.weight))
            .collect();
        assert!(weights.contains(&("TaintToleration", 3)));
        assert!(weights.contains(&("NodeAffinity", 2)));
        assert!(weights.contains(&("NodeResourcesFit", 1)));
        assert!(weights.contains(&("ImageLocality", 1)));
    }

    #[test]
    fn volume_binding_runs_where_upstream_puts_it() {
        let config = Config::default_config();
        let Some(profile) = config.profile(DEFAULT_SCHEDULER_NAME) else {
            panic!("no default profile");
        };
        for list in [names(&profile.pre_filter), names(&profile.filter)] {
            let at = |name: &str| list.iter().position(|n| *n == name);
            assert!(at("VolumeRestrictions") < at("VolumeBinding"), "{list:?}");
            assert!(at("VolumeBinding").is_some() && at("VolumeBinding") < at("PodTopologySpread"));
        }
        assert_eq!(
            profile.volume_bind_timeout,
            Some(volume_binding::DEFAULT_BIND_TIMEOUT)
        );
        let configured = Config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args:\n      \
             bindTimeoutSeconds: 30\n- schedulerName: no-volumes\n  plugins:\n    \
             multiPoint:\n      disabled:\n      - name: VolumeBinding\n",
        );
        let configured = configured.unwrap_or_else(|e| panic!("{e}"));
        let timeout = |name: &str| {
            configured
                .profile(name)
                .and_then(|p| p.volume_bind_timeout)
                .map(|t| t.as_secs())
        };
        assert_eq!(timeout(DEFAULT_SCHEDULER_NAME), Some(30));
        assert_eq!(timeout("no-volumes"), None);
    }

    #[test]
    fn profiles_enable_disable_and_weight() {
        let config = Config::parse(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: "*"
      enabled:
      - name: NodeResourcesFit
        weight: 5
    filter:
      disabled:
      - name: TaintToleration
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#,
        );
        let config = match config {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.profiles.len(), 2);
        let Some(packer) = config.profile("packer") else {
            panic!("no packer profile");
        };
        assert_eq!(packer.percentage_of_nodes_to_score, 30);
        let weights: Vec<(&str, i64)> = packer
            .score
            .iter()
            .map(|w| (w.plugin.name(), w.weight))
            .collect();
        assert_eq!(weights, [("NodeResourcesFit", 5)]);
        assert!(!names(&packer.filter).contains(&"TaintToleration"));
        assert!(names(&packer.filter).contains(&"NodeResourcesFit"));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let bad = [
            "apiVersion: v1\nkind: Pod\n",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: Nope\n",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- schedulerName: a\n- schedulerName: a\n",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             percentageOfNodesToScore: 101\n",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      \
             scoringStrategy:\n        type: Bogus\n",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             profiles:\n- pluginConfig:\n  - name: VolumeBinding\n    args:\n      \
             bindTimeoutSeconds: -1\n",
        ];
        for text in bad {
            assert!(Config::parse(text).is_err(), "accepted: {text}");
        }
    }
}
