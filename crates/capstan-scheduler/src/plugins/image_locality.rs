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

/// The pod's side of the score, worked out once per cycle: each container image's
/// normalised name with how many nodes hold it, and how many containers there are.
#[derive(Clone, Debug, Default)]
pub struct PodImages {
    /// (normalised image name, nodes holding it), one per container with an image.
    images: Vec<(String, usize)>,
    /// Init and app containers, with or without an image (the ceiling counts them all).
    containers: usize,
    /// All nodes.
    total_nodes: usize,
}

impl PodImages {
    /// The pod's images, counted against the cluster by `nodes_with`.
    pub fn of(pod: &PodInfo, nodes_with: impl Fn(&str) -> usize, total_nodes: usize) -> PodImages {
        let mut out = PodImages {
            total_nodes,
            ..PodImages::default()
        };
        let Some(spec) = pod.pod.spec.as_ref() else {
            return out;
        };
        for container in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            out.containers += 1;
            if let Some(image) = container.image.as_deref() {
                let name = normalize_image_name(image);
                let count = nodes_with(&name);
                out.images.push((name, count));
            }
        }
        out
    }
}

/// Upstream's score: the sum over the pod's containers' images present on the node of
/// size × (nodes with the image / all nodes), clamped to the thresholds and scaled to 0–100.
pub fn score(pod: &PodImages, node: &NodeInfo) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * pod.containers as i64;
    if max_threshold <= MIN_THRESHOLD || node.images.is_empty() || pod.total_nodes == 0 {
        return 0;
    }
    let mut sum = 0i64;
    for (name, nodes_with) in &pod.images {
        if let Some(size) = node.images.get(name) {
            let spread = *nodes_with as f64 / pod.total_nodes as f64;
            sum += (*size as f64 * spread) as i64;
        }
    }
    let sum = sum.clamp(MIN_THRESHOLD, max_threshold);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
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
        let images = PodImages::of(
            pod,
            |name| snapshot.nodes_with_image(name),
            snapshot.num_nodes(),
        );
        state.write(STATE, images);
        Status::success()
    }
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(state
            .read::<PodImages>(STATE)
            .map_or(0, |images| score(images, node)))
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
        let on = |nodes_with: usize| PodImages::of(&p, |_| nodes_with, 2);
        // On every node: full size counts; (500-23)/(1000-23) of 100 = 48.
        assert_eq!(score(&on(2), &node), 48);
        // On one of two nodes: half the size counts; (250-23)*100/977 = 23.
        assert_eq!(score(&on(1), &node), 23);
        // Not on the node.
        let empty = node_with_images(json!([]));
        assert_eq!(score(&on(1), &empty), 0);
        // Small images stay under the threshold.
        let small = node_with_images(json!([{"names": ["big:latest"], "sizeBytes": 10 * MB}]));
        assert_eq!(score(&on(2), &small), 0);
        // A second container without a local image raises the ceiling: (500-23)*100/1977.
        let two = pod(
            "p",
            json!({}),
            json!({"containers": [{"name": "c", "image": "big"}, {"name": "d", "image": "x"}]}),
        );
        assert_eq!(score(&PodImages::of(&two, |_| 2, 2), &node), 24);
    }
}
