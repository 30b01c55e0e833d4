//! The label and field selectors of a list, watch or deletecollection, parsed once from the
//! query (with `capstan_api::selector`) and matched against each object.

use std::collections::BTreeMap;

use capstan_api::selector::{FieldSelector, LabelSelector};

use crate::status::ApiError;

/// Parsed `labelSelector` and `fieldSelector`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selectors {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Selectors {
    /// Parses the two query parameters; errors are upstream's 400s.
    pub(crate) fn parse(label: Option<&str>, field: Option<&str>) -> Result<Self, ApiError> {
        Ok(Selectors {
            labels: LabelSelector::parse(label.unwrap_or_default())
                .map_err(|e| ApiError::from(e.to_status()))?,
            fields: FieldSelector::parse(field.unwrap_or_default())
                .map_err(|e| ApiError::from(e.to_status()))?,
        })
    }

    /// Whether both selectors select everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object with `labels` and field values given by `field` matches.
    pub(crate) fn matches(
        &self,
        labels: &BTreeMap<String, String>,
        field: impl Fn(&str) -> Option<String>,
    ) -> bool {
        self.labels.matches(labels) && self.fields.matches_with(field)
    }

    /// The value the field selector requires `field` to have (its first `=` term on it),
    /// upstream's `RequiresExactMatch`.
    pub(crate) fn exact_field(&self, field: &str) -> Option<&str> {
        self.fields.requires_exact_match(field)
    }

    /// Checks that the field selector names only `metadata.name`, `metadata.namespace` or one
    /// of `supported`, with upstream's message for either kind of resource.
    pub(crate) fn check_fields(&self, supported: &[&str]) -> Result<(), ApiError> {
        let result = if supported.is_empty() {
            self.fields.check_default_fields()
        } else {
            let mut all = vec!["metadata.name", "metadata.namespace"];
            all.extend_from_slice(supported);
            self.fields.check_supported_fields(&all)
        };
        result.map_err(|e| ApiError::from(e.to_status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_labels_and_fields_together() {
        let s =
            Selectors::parse(Some("app in (web,api),tier!=db"), Some("spec.nodeName=n1")).unwrap();
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        assert!(s.matches(&labels, |f| (f == "spec.nodeName").then(|| "n1".to_owned())));
        assert!(!s.matches(&labels, |_| Some("n2".to_owned())));
        assert!(s.check_fields(&["spec.nodeName"]).is_ok());
        let error = s.check_fields(&[]).unwrap_err();
        assert_eq!(error.status().code(), 400);
        assert!(Selectors::parse(Some("a b"), None).is_err());
        assert!(Selectors::default().is_empty());
    }
}
