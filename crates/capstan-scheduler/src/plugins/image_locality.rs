//! ImageLocality: nodes that already hold a pod's images score higher, scaled by how widely
//! each image is spread over the cluster so that one node does not attract every pod.

use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, Point, Status};
use crate::snapshot::{NodeInfo, PodInfo, normalize_image_name};

/// The plugin's registered name.
pub const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
/// Below this sum of image sizes a node scores 0 (upstream's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Image size counted at most per container (upstream's `maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The plugin; it reads how many nodes hold each image from the snapshot through the
/// framework, which passes it to [`score`].
#[derive(Debug)]
pub struct ImageLocality;

/// Upstream's score: the sum over the pod's containers' images present on the node of
/// size × (nodes with the image / all nodes), clamped to the thresholds and scaled to 0–100.
pub fn score(
    pod: &PodInfo,
    node: &NodeInfo,
    nodes_with: impl Fn(&str) -> usize,
    total_nodes: usize,
) -> i64 {
    let Some(spec) = pod.pod.spec.as_ref() else {
        return 0;
    };
    let containers: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    let mut sum = 0i64;
    for container in &containers {
        let Some(image) = container.image.as_deref() else {
            continue;
        };
        let name = normalize_image_name(image);
        if let Some(size) = node.images.get(&name)
            && total_nodes > 0
        {
            let spread = nodes_with(&name) as f64 / total_nodes as f64;
            sum += (*size as f64 * spread) as i64;
        }
    }
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers.len() as i64;
    let sum = sum.clamp(MIN_THRESHOLD, max_threshold.max(MIN_THRESHOLD));
    if max_threshold <= MIN_THRESHOLD {
        return 0;
    }
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// The state the framework gives ImageLocality: how many nodes hold each image.
#[derive(Debug, Default)]
pub struct Spread {
    /// Nodes per normalised image name, for the pod's images.
    pub nodes_with: std::collections::HashMap<String, usize>,
    /// All nodes.
    pub total: usize,
}

const STATE: &str = "PreScoreImageLocality";

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreScore, Point::Score]
    }
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        snapshot: &crate::snapshot::Snapshot,
    ) -> Status {
        let mut spread = Spread {
            total: snapshot.num_nodes(),
            ..Spread::default()
        };
        if let Some(spec) = pod.pod.spec.as_ref() {
            for c in spec
                .init_containers
                .iter()
                .flatten()
                .chain(spec.containers.iter())
            {
                if let Some(image) = c.image.as_deref() {
                    let name = normalize_image_name(image);
                    let count = snapshot.nodes_with_image(&name);
                    spread.nodes_with.insert(name, count);
                }
            }
        }
        state.write(STATE, spread);
        Status::success()
    }
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(spread) = state.read::<Spread>(STATE) else {
            return Ok(0);
        };
        Ok(score(
            pod,
            node,
            |name| spread.nodes_with.get(name).copied().unwrap_or(0),
            spread.total,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::test_util::*;
    use serde_json::json;

    fn node_with_images(images: serde_json::Value) -> NodeInfo {
        NodeInfo::new(
            node(
                "n",
                json!({}),
                json!({}),
                json!({"allocatable": {"pods": "10"}, "images": images}),
            ),
            [],
        )
    }

    #[test]
    fn local_images_score_by_size_and_spread() {
        let p = pod(
            "p",
            json!({}),
            json!({"containers": [{"name": "c", "image": "big"}]}),
        );
        let node = node_with_images(json!([{"names": ["big:latest"], "sizeBytes": 500 * MB}]));
        // On every node: full size counts; (500-23)/(1000-23) of 100 = 48.
        assert_eq!(score(&p, &node, |_| 2, 2), 48);
        // On one of two nodes: half the size counts; (250-23)*100/977 = 23.
        assert_eq!(score(&p, &node, |_| 1, 2), 23);
        // Not on the node.
        let empty = node_with_images(json!([]));
        assert_eq!(score(&p, &empty, |_| 1, 2), 0);
        // Small images stay under the threshold.
        let small = node_with_images(json!([{"names": ["big:latest"], "sizeBytes": 10 * MB}]));
        assert_eq!(score(&p, &small, |_| 2, 2), 0);
    }
}
