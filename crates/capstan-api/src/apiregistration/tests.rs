use serde_json::json;

use super::*;

fn service(value: serde_json::Value) -> APIService {
    let mut service: APIService = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
    default_api_service(&mut service);
    service
}

fn errors(service: &APIService) -> Vec<String> {
    validate_api_service(service)
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body()))
        .collect()
}

#[test]
fn api_services_round_trip_with_their_type_meta() {
    let value = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                 "service": {"namespace": "kube-system", "name": "metrics-server"},
                 "insecureSkipTLSVerify": true,
                 "groupPriorityMinimum": 100, "versionPriority": 100},
    });
    let decoded = service(value.clone());
    let mut expected = value;
    expected["spec"]["service"]["port"] = json!(443);
    assert_eq!(serde_json::to_value(&decoded).unwrap(), expected);
    assert_eq!(errors(&decoded), Vec::<String>::new());
}

#[test]
fn api_services_are_refused_with_upstreams_errors() {
    let bad = service(json!({
        "metadata": {"name": "v1.wrong"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "caBundle": "AAEC",
                 "insecureSkipTLSVerify": true, "groupPriorityMinimum": 0,
                 "versionPriority": 1001},
    }));
    assert_eq!(
        errors(&bad),
        [
            "metadata.name: Invalid value: \"v1.wrong\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\"",
            "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
            "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
            "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle",
            "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
        ]
    );
    let unnamed = service(json!({
        "metadata": {"name": "v1."},
        "spec": {"version": "v1", "service": {}, "groupPriorityMinimum": 1, "versionPriority": 1},
    }));
    assert_eq!(
        errors(&unnamed),
        [
            "spec.service.namespace: Required value",
            "spec.service.name: Required value",
        ]
    );
}
