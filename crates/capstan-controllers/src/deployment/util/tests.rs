//! Table tests of the pure helpers: fenceposts, hashing, template equality, sizes,
//! proportions, revisions, annotations, conditions and the status calculation.

use super::*;
use crate::deployment::fixtures::*;

#[test]
fn fenceposts_round_surge_up_and_unavailable_down() {
    #[track_caller]
    fn check(surge: &str, unavailable: &str, desired: i32, expected: Result<(i32, i32), &str>) {
        let got = resolve_fenceposts(Some(&ios(surge)), Some(&ios(unavailable)), desired);
        assert_eq!(
            got,
            expected.map_err(str::to_owned),
            "{surge}/{unavailable} of {desired}"
        );
    }
    check("25%", "25%", 10, Ok((3, 2)));
    check("25%", "25%", 3, Ok((1, 0)));
    check("25%", "25%", 1, Ok((1, 0)));
    check("39%", "39%", 10, Ok((4, 3)));
    check("1", "1", 10, Ok((1, 1)));
    check("0%", "0%", 0, Ok((0, 1)));
    check("0", "1%", 2, Ok((0, 1)));
    check("0%", "1%", 1, Ok((0, 1)));
    check("1%", "25%", 2, Ok((1, 0)));
    check("1%", "0%", 1, Ok((1, 0)));
    check("100%", "0", 3, Ok((3, 0)));
    check("150%", "0", 2, Ok((3, 0)));
    check(
        "oops",
        "25%",
        10,
        Err("invalid value for IntOrString: invalid type: string is not a percentage"),
    );
    check(
        "25%",
        "urg",
        10,
        Err("invalid value for IntOrString: invalid type: string is not a percentage"),
    );
    assert_eq!(resolve_fenceposts(None, None, 5), Ok((0, 1)));
}

#[test]
fn max_surge_and_unavailable_follow_the_strategy() {
    #[track_caller]
    fn check(d: Deployment, expected: (i32, i32)) {
        assert_eq!((max_surge(&d), max_unavailable(&d)), expected);
    }
    check(deployment(10, "a"), (3, 2));
    check(with_fenceposts(deployment(4, "a"), "0", "100%"), (0, 4));
    check(with_fenceposts(deployment(2, "a"), "0", "5"), (0, 2));
    check(deployment(0, "a"), (0, 0));
    check(recreate(deployment(10, "a")), (0, 0));
}

#[test]
fn safe_encoding_and_fnv() {
    assert_eq!(safe_encode("0123456789"), "456789bcdf");
    assert_eq!(safe_encode("abc"), "vwx");
    assert_eq!(fnv32a(2_166_136_261, b""), 0x811c_9dc5);
    assert_eq!(fnv32a(2_166_136_261, b"a"), 0xe40c_292c);
    assert_eq!(fnv32a(2_166_136_261, b"foobar"), 0xbf9c_f968);
}

#[test]
fn template_hash_is_stable_and_moves_with_the_collision_count() {
    let t = template("nginx:1.25");
    let hash = compute_hash(&t, None);
    // Pinned: a change here renames every replica set of every deployment.
    assert_eq!(hash, compute_hash(&template("nginx:1.25"), None));
    assert!(
        hash.len() <= 10 && hash.chars().all(|c| "456789bcdf".contains(c)),
        "{hash}"
    );
    assert_eq!(hash, "668dc66c56");
    assert_ne!(compute_hash(&template("nginx:1.26"), None), hash);
    let with_count = compute_hash(&t, Some(0));
    assert_ne!(with_count, hash);
    assert_ne!(compute_hash(&t, Some(1)), with_count);
}

#[test]
fn templates_compare_without_the_hash_label() {
    #[track_caller]
    fn check(a: PodTemplateSpec, b: PodTemplateSpec, expected: bool) {
        assert_eq!(equal_ignore_hash(&a, &b), expected);
        assert_eq!(equal_ignore_hash(&b, &a), expected);
    }
    let plain = template("a");
    let mut hashed = template("a");
    hashed
        .metadata
        .as_mut()
        .and_then(|m| m.labels.as_mut())
        .map(|l| l.insert(HASH_LABEL.into(), "123".into()));
    check(plain.clone(), hashed.clone(), true);
    check(plain.clone(), template("b"), false);
    let mut other_label = template("a");
    other_label
        .metadata
        .as_mut()
        .and_then(|m| m.labels.as_mut())
        .map(|l| l.insert("x".into(), "y".into()));
    check(plain.clone(), other_label, false);
    // nil and empty lists are alike, as Go's semantic equality has it.
    let mut empty_lists = template("a");
    if let Some(spec) = empty_lists.spec.as_mut() {
        spec.volumes = Some(Vec::new());
        spec.containers[0].env = Some(Vec::new());
    }
    check(plain.clone(), empty_lists, true);
    let mut annotated = template("a");
    if let Some(m) = annotated.metadata.as_mut() {
        m.annotations = Some(
            [(
                "kubectl.kubernetes.io/restartedAt".to_owned(),
                "now".to_owned(),
            )]
            .into(),
        );
    }
    check(plain, annotated, false);
}

#[test]
fn new_replica_set_sizes() {
    #[track_caller]
    fn check(d: Deployment, old: &[i32], new: i32, expected: Result<i32, &str>) {
        let old: Vec<ReplicaSet> = old.iter().map(|&r| sized("old", r, None, 0)).collect();
        let new = sized("new", new, None, 1);
        let all: Vec<&ReplicaSet> = old.iter().chain([&new]).collect();
        assert_eq!(
            new_rs_new_replicas(&d, &all, &new),
            expected.map_err(str::to_owned)
        );
    }
    // Rolling updates: (replicas, maxSurge, maxUnavailable), old sizes, new size, expected.
    let rolling = [
        // Surge 1: 3 + 1 allowed.
        (3, "1", "0", vec![], 0, 3),
        (3, "1", "0", vec![3], 0, 1),
        (3, "1", "0", vec![3], 1, 1),
        (3, "1", "0", vec![2], 1, 2),
        // Cannot scale up beyond the surge: stays.
        (1, "1", "0", vec![5], 5, 5),
        // Never beyond the deployment's size.
        (6, "10", "0", vec![], 2, 6),
        (10, "25%", "25%", vec![8], 2, 5),
    ];
    for (replicas, surge, unavailable, old, new, expected) in rolling {
        check(
            with_fenceposts(deployment(replicas, "a"), surge, unavailable),
            &old,
            new,
            Ok(expected),
        );
    }
    check(recreate(deployment(3, "a")), &[1], 1, Ok(3));
    let mut odd = deployment(3, "a");
    if let Some(s) = odd.spec.as_mut().and_then(|s| s.strategy.as_mut()) {
        s.type_ = Some("Canary".into());
    }
    check(odd, &[], 0, Err("deployment type Canary isn't supported"));
}

#[test]
fn proportions() {
    #[track_caller]
    fn check(
        rs_size: i32,
        annotated: Option<i32>,
        d_size: i32,
        to_add: i32,
        added: i32,
        expected: i32,
    ) {
        let d = with_fenceposts(deployment(d_size, "a"), "0", "1");
        let rs = sized("rs", rs_size, annotated, 0);
        assert_eq!(get_proportion(&rs, &d, to_add, added), expected);
    }
    check(2, Some(5), 10, 5, 0, 2);
    check(3, Some(5), 10, 5, 4, 1); // capped by what is left
    check(3, Some(5), 3, -2, 0, -1);
    check(8, Some(9), 4, -5, 0, -4);
    check(1, Some(9), 4, -5, -4, -1);
    check(0, Some(5), 10, 5, 0, 0); // never from zero
    check(5, Some(5), 0, -5, 0, -5); // to zero: all of it
    check(4, None, 8, 4, 0, 0); // no annotation, no status: no estimate
}

#[test]
fn revisions() {
    let d = deployment(1, "a");
    let rss = [
        rs(&d, "a", 0, 0, 1, 3),
        rs(&d, "b", 0, 0, 2, 7),
        rs(&d, "c", 0, 0, 3, 5),
    ];
    assert_eq!(max_revision(&rss), 7);
    assert_eq!(last_revision(&rss), 5);
    assert_eq!(max_revision(&[]), 0);
    let mut bad = rs(&d, "x", 0, 0, 1, 1);
    bad.metadata
        .annotations
        .as_mut()
        .map(|a| a.insert(REVISION_ANNOTATION.into(), "x".into()));
    assert_eq!(max_revision([&bad]), 0);
    let mut sorted = [rss[1].clone(), rss[2].clone(), rss[0].clone()];
    sorted.sort_by(by_revision);
    let names: Vec<i64> = sorted.iter().map(|r| revision(r).unwrap_or(-1)).collect();
    assert_eq!(names, [3, 5, 7]);
}

#[test]
fn new_replica_set_annotations() {
    #[track_caller]
    fn check(
        d_annotations: &[(&str, &str)],
        rs_annotations: &[(&str, &str)],
        new_revision: &str,
        exists: bool,
        limit: usize,
        expected: &[(&str, &str)],
        changed: bool,
    ) {
        let mut d = deployment(3, "a");
        d.metadata.annotations = Some(
            d_annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut rs = sized("rs", 1, None, 0);
        rs.metadata.annotations = Some(
            rs_annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        assert_eq!(
            set_new_rs_annotations(&d, &mut rs, new_revision, exists, limit),
            changed
        );
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(rs.metadata.annotations, Some(expected));
    }
    let rev = REVISION_ANNOTATION;
    let hist = REVISION_HISTORY_ANNOTATION;
    // A new replica set: revision, copied annotations (not the skipped ones), replica counts.
    check(
        &[
            ("team", "x"),
            (LAST_APPLIED_ANNOTATION, "{}"),
            (rev, "4"),
            (ROLLBACK_TO_ANNOTATION, "1"),
        ],
        &[],
        "5",
        false,
        2000,
        &[
            ("team", "x"),
            (rev, "5"),
            (DESIRED_REPLICAS_ANNOTATION, "3"),
            (MAX_REPLICAS_ANNOTATION, "4"),
        ],
        true,
    );
    // Existing, already current: nothing.
    check(&[], &[(rev, "5")], "5", true, 2000, &[(rev, "5")], false);
    // Existing with a higher revision (old ones deleted since): kept.
    check(&[], &[(rev, "9")], "5", true, 2000, &[(rev, "9")], false);
    // Rolled back to: the old revision goes to the history.
    check(
        &[],
        &[(rev, "1")],
        "3",
        true,
        2000,
        &[(rev, "3"), (hist, "1")],
        true,
    );
    check(
        &[],
        &[(rev, "3"), (hist, "1")],
        "5",
        true,
        2000,
        &[(rev, "5"), (hist, "1,3")],
        true,
    );
    // History bounded: the oldest entries go.
    check(
        &[],
        &[(rev, "30"), (hist, "10,20")],
        "40",
        true,
        5,
        &[(rev, "40"), (hist, "20,30")],
        true,
    );
    // Unparsable revision: left alone.
    check(&[], &[(rev, "x")], "2", true, 2000, &[(rev, "x")], false);
}

#[test]
fn annotations_go_back_to_the_deployment_on_rollback() {
    let mut d = deployment(1, "a");
    d.metadata.annotations = Some(
        [
            ("change-cause", "edit"),
            (REVISION_ANNOTATION, "2"),
            (LAST_APPLIED_ANNOTATION, "{}"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    let mut old = sized("rs", 0, Some(2), 0);
    if let Some(a) = old.metadata.annotations.as_mut() {
        a.insert("change-cause".into(), "create".into());
        a.insert(REVISION_ANNOTATION.into(), "1".into());
    }
    set_deployment_annotations_to(&mut d, &old);
    let expected: BTreeMap<String, String> = [
        ("change-cause", "create"),
        (REVISION_ANNOTATION, "2"),
        (LAST_APPLIED_ANNOTATION, "{}"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into();
    assert_eq!(d.metadata.annotations, Some(expected));
}

#[test]
fn replicas_annotations() {
    let mut rs = sized("rs", 1, None, 0);
    assert!(replicas_annotations_need_update(&rs, 3, 4));
    assert!(set_replicas_annotations(&mut rs, 3, 4));
    assert!(!replicas_annotations_need_update(&rs, 3, 4));
    assert!(!set_replicas_annotations(&mut rs, 3, 4));
    assert!(replicas_annotations_need_update(&rs, 3, 5));
    assert_eq!(int_annotation(&rs, DESIRED_REPLICAS_ANNOTATION), Some(3));
}

#[test]
fn conditions_keep_transition_times_unless_the_status_changes() {
    let mut status = DeploymentStatus::default();
    set_condition(
        &mut status,
        new_condition(
            PROGRESSING,
            "True",
            NEW_REPLICA_SET_REASON,
            "a".into(),
            at(10),
        ),
    );
    set_condition(
        &mut status,
        new_condition(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "b".into(),
            at(10),
        ),
    );
    // Same status and reason: untouched.
    set_condition(
        &mut status,
        new_condition(
            PROGRESSING,
            "True",
            NEW_REPLICA_SET_REASON,
            "other".into(),
            at(20),
        ),
    );
    let p = get_condition(Some(&status), PROGRESSING)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (p.message.as_deref(), p.last_update_time.map(|t| t.0)),
        (Some("a"), Some(at(10)))
    );
    // Same status, new reason: transition time kept, moved last.
    set_condition(
        &mut status,
        new_condition(
            PROGRESSING,
            "True",
            NEW_RS_AVAILABLE_REASON,
            "c".into(),
            at(30),
        ),
    );
    let p = get_condition(Some(&status), PROGRESSING)
        .cloned()
        .unwrap_or_default();
    assert_eq!(p.last_transition_time.map(|t| t.0), Some(at(10)));
    assert_eq!(p.last_update_time.map(|t| t.0), Some(at(30)));
    let types: Vec<&str> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, [AVAILABLE, PROGRESSING]);
    // New status: new transition time.
    set_condition(
        &mut status,
        new_condition(PROGRESSING, "False", TIMED_OUT_REASON, "d".into(), at(40)),
    );
    let p = get_condition(Some(&status), PROGRESSING)
        .cloned()
        .unwrap_or_default();
    assert_eq!(p.last_transition_time.map(|t| t.0), Some(at(40)));
    remove_condition(&mut status, PROGRESSING);
    remove_condition(&mut status, AVAILABLE);
    assert_eq!(status.conditions, None);
}

#[test]
fn status_from_replica_sets() {
    #[track_caller]
    fn check(
        d: Deployment,
        rss: &[ReplicaSet],
        new: usize,
        expected: [i32; 5],
        available: (&str, &str),
    ) {
        let all: Vec<&ReplicaSet> = rss.iter().collect();
        let status = calculate_status(&all, rss.get(new), &d, at(100));
        let got = [
            status.replicas.unwrap_or(0),
            status.updated_replicas.unwrap_or(0),
            status.ready_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
            status.unavailable_replicas.unwrap_or(0),
        ];
        assert_eq!(
            got, expected,
            "replicas, updated, ready, available, unavailable"
        );
        assert_eq!(status.observed_generation, Some(1));
        let c = get_condition(Some(&status), AVAILABLE)
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref().unwrap_or_default()),
            available
        );
        let message = if available.0 == "True" {
            "Deployment has minimum availability."
        } else {
            "Deployment does not have minimum availability."
        };
        assert_eq!(c.message.as_deref(), Some(message));
    }
    let d = deployment(4, "b"); // maxUnavailable 1
    check(
        d.clone(),
        &[rs(&d, "a", 3, 3, 1, 1), rs(&d, "b", 2, 0, 2, 2)],
        1,
        [5, 2, 3, 3, 2],
        ("True", MINIMUM_REPLICAS_AVAILABLE),
    );
    check(
        d.clone(),
        &[rs(&d, "a", 2, 2, 1, 1), rs(&d, "b", 3, 0, 2, 2)],
        1,
        [5, 3, 2, 2, 3],
        ("False", MINIMUM_REPLICAS_UNAVAILABLE),
    );
    // More available than asked for (scaling down): no negative unavailable.
    let mut shrinking = rs(&d, "b", 2, 3, 2, 2);
    if let Some(s) = shrinking.status.as_mut() {
        s.replicas = 3;
    }
    check(
        d.clone(),
        &[shrinking],
        0,
        [3, 3, 3, 3, 0],
        ("True", MINIMUM_REPLICAS_AVAILABLE),
    );
    check(
        deployment(0, "a"),
        &[],
        9,
        [0, 0, 0, 0, 0],
        ("True", MINIMUM_REPLICAS_AVAILABLE),
    );
}

#[test]
fn complete_progressing_and_timed_out() {
    let mut d = deployment(3, "a");
    let counts = |replicas, updated, available, ready| DeploymentStatus {
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        available_replicas: Some(available),
        ready_replicas: Some(ready),
        observed_generation: Some(1),
        ..Default::default()
    };
    assert!(deployment_complete(&d, &counts(3, 3, 3, 3)));
    assert!(!deployment_complete(&d, &counts(4, 3, 3, 3)));
    assert!(!deployment_complete(&d, &counts(3, 3, 2, 3)));
    d.metadata.generation = Some(2);
    assert!(!deployment_complete(&d, &counts(3, 3, 3, 3)));

    d.status = Some(counts(4, 1, 3, 3));
    assert!(
        deployment_progressing(&d, &counts(4, 2, 3, 3)),
        "more updated"
    );
    assert!(deployment_progressing(&d, &counts(3, 1, 3, 3)), "fewer old");
    assert!(
        deployment_progressing(&d, &counts(4, 1, 3, 4)),
        "more ready"
    );
    assert!(
        deployment_progressing(&d, &counts(4, 1, 4, 3)),
        "more available"
    );
    assert!(!deployment_progressing(&d, &counts(4, 1, 3, 3)));

    let with = |reason: &str, updated: i64| {
        let mut s = counts(4, 1, 3, 3);
        s.conditions = Some(vec![new_condition(
            PROGRESSING,
            "True",
            reason,
            String::new(),
            at(updated),
        )]);
        s
    };
    assert!(!deployment_timed_out(
        &d,
        &with(REPLICA_SET_UPDATED_REASON, 1000),
        at(1600)
    ));
    assert!(deployment_timed_out(
        &d,
        &with(REPLICA_SET_UPDATED_REASON, 1000),
        at(1601)
    ));
    assert!(!deployment_timed_out(
        &d,
        &with(NEW_RS_AVAILABLE_REASON, 0),
        at(5000)
    ));
    assert!(deployment_timed_out(
        &d,
        &with(TIMED_OUT_REASON, 5000),
        at(5000)
    ));
    assert!(
        !deployment_timed_out(&d, &counts(4, 1, 3, 3), at(5000)),
        "no condition"
    );
    if let Some(s) = d.spec.as_mut() {
        s.progress_deadline_seconds = Some(i32::MAX);
    }
    assert!(!deployment_timed_out(
        &d,
        &with(REPLICA_SET_UPDATED_REASON, 0),
        at(5000)
    ));
}

#[test]
fn active_or_latest_and_saturation() {
    let d = deployment(3, "c");
    let old = [rs(&d, "a", 0, 0, 1, 1), rs(&d, "b", 0, 0, 2, 2)];
    let new = rs(&d, "c", 0, 0, 3, 3);
    let name = |rs: Option<&ReplicaSet>| rs.and_then(|r| r.metadata.name.clone());
    // None active: the new one, else the newest old one.
    assert_eq!(
        name(find_active_or_latest(Some(&new), &old)),
        new.metadata.name
    );
    assert_eq!(
        name(find_active_or_latest(None, &old)),
        old[1].metadata.name
    );
    assert_eq!(name(find_active_or_latest(None, &[])), None);
    let one_active = [rs(&d, "a", 2, 2, 1, 1), rs(&d, "b", 0, 0, 2, 2)];
    assert_eq!(
        name(find_active_or_latest(Some(&new), &one_active)),
        one_active[0].metadata.name
    );
    let new_active = rs(&d, "c", 3, 3, 3, 3);
    assert_eq!(
        name(find_active_or_latest(Some(&new_active), &one_active)),
        None
    );

    assert!(is_saturated(&d, Some(&new_active)));
    assert!(
        !is_saturated(&d, Some(&rs(&d, "c", 3, 2, 3, 3))),
        "not all available"
    );
    assert!(!is_saturated(&deployment(4, "c"), Some(&new_active)));
    assert!(!is_saturated(&d, None));
}
