//! The one conversion a core/v1 Secret goes through on its way in: `stringData`, a write-only
//! convenience of the v1 API, is merged into `data` (its values win over `data`'s for the same
//! key) and dropped, as upstream's v1-to-internal conversion does. The stored and returned
//! Secret never carries `stringData`.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

/// Moves `secret.string_data` into `secret.data`.
pub fn fold_string_data(secret: &mut Secret) {
    let Some(strings) = secret.string_data.take() else {
        return;
    };
    if strings.is_empty() {
        return;
    }
    let data = secret.data.get_or_insert_with(Default::default);
    for (key, value) in strings {
        data.insert(key, ByteString(value.into_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn string_data_is_merged_into_data_and_wins() {
        let mut secret = Secret {
            data: Some(BTreeMap::from([
                ("a".to_owned(), ByteString(b"old".to_vec())),
                ("b".to_owned(), ByteString(b"kept".to_vec())),
            ])),
            string_data: Some(BTreeMap::from([
                ("a".to_owned(), "new".to_owned()),
                ("c".to_owned(), "added".to_owned()),
            ])),
            ..Secret::default()
        };
        fold_string_data(&mut secret);
        assert_eq!(secret.string_data, None);
        let data = secret.data.unwrap();
        assert_eq!(data["a"].0, b"new");
        assert_eq!(data["b"].0, b"kept");
        assert_eq!(data["c"].0, b"added");
    }

    #[test]
    fn no_string_data_leaves_data_alone() {
        let mut secret = Secret::default();
        fold_string_data(&mut secret);
        assert_eq!(secret.data, None);
        let mut empty = Secret {
            string_data: Some(BTreeMap::new()),
            ..Secret::default()
        };
        fold_string_data(&mut empty);
        assert_eq!((empty.data, empty.string_data), (None, None));
    }
}
