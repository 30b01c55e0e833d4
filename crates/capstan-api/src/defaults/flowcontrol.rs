//! `flowcontrol.apiserver.k8s.io/v1` defaults: a FlowSchema's matching precedence is 1000; a
//! limited priority level has 30 nominal shares and lends nothing, and its queuing 64 queues,
//! hands of 8 and 50 requests per queue; an exempt level has no shares and lends nothing.

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};

/// FlowSchema defaults.
pub fn default_flow_schema(fs: &mut FlowSchema) {
    if let Some(spec) = fs.spec.as_mut() {
        spec.matching_precedence.get_or_insert(1000);
    }
}

/// PriorityLevelConfiguration defaults.
pub fn default_priority_level(pl: &mut PriorityLevelConfiguration) {
    let Some(spec) = pl.spec.as_mut() else {
        return;
    };
    if let Some(limited) = spec.limited.as_mut() {
        limited.nominal_concurrency_shares.get_or_insert(30);
        limited.lendable_percent.get_or_insert(0);
        if let Some(queuing) = limited
            .limit_response
            .as_mut()
            .and_then(|r| r.queuing.as_mut())
        {
            queuing.queues.get_or_insert(64);
            queuing.hand_size.get_or_insert(8);
            queuing.queue_length_limit.get_or_insert(50);
        }
    }
    if let Some(exempt) = spec.exempt.as_mut() {
        exempt.nominal_concurrency_shares.get_or_insert(0);
        exempt.lendable_percent.get_or_insert(0);
    }
}
