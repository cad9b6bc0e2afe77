//! The server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.
//!
//! Both are pure: members' subscriptions, the subscribed topics' partition counts and the
//! previous target assignment in, a new target assignment out. `uniform` is sticky: a member
//! keeps what it had as long as the balance allows, so a rebalance moves as few partitions as it
//! can; with identical subscriptions every member ends with the same count, give or take one.
//! `range` gives each member, per topic, a contiguous range of that topic's partitions (members
//! in member-id order), so members subscribed to co-partitioned topics get the same indexes.

use std::collections::{BTreeMap, BTreeSet};

/// A member's partitions, by topic name.
pub type Partitions = BTreeMap<String, BTreeSet<i32>>;

/// The assignors a broker offers (`group.consumer.assignors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Balanced and sticky.
    Uniform,
    /// Contiguous ranges per topic.
    Range,
}

impl Assignor {
    /// The name clients ask for (`group.remote.assignor`).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The assignor of that name.
    pub fn parse(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// The target assignment of every member. `members` maps each member to the topics it
    /// subscribes to; `topics` gives the partition count of every topic that exists (topics a
    /// member names but that do not exist are skipped); `previous` is the last target.
    pub fn assign(
        self,
        members: &BTreeMap<String, BTreeSet<String>>,
        topics: &BTreeMap<String, i32>,
        previous: &BTreeMap<String, Partitions>,
    ) -> BTreeMap<String, Partitions> {
        match self {
            Assignor::Uniform => uniform(members, topics, previous),
            Assignor::Range => range(members, topics),
        }
    }
}

fn range(
    members: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = members
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    for (topic, &count) in topics {
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, subscribed)| subscribed.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        let n = subscribers.len() as i32;
        let (base, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribers.into_iter().enumerate() {
            let take = base + i32::from((i as i32) < extra);
            if let Some(assigned) = out.get_mut(member).filter(|_| take > 0) {
                assigned
                    .entry(topic.clone())
                    .or_default()
                    .extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

/// Every (topic, partition) some member subscribes to.
fn subscribed_partitions(
    members: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
) -> Vec<(String, i32)> {
    let wanted: BTreeSet<&String> = members.values().flatten().collect();
    topics
        .iter()
        .filter(|(t, _)| wanted.contains(t))
        .flat_map(|(t, &count)| (0..count.max(0)).map(move |p| (t.clone(), p)))
        .collect()
}

fn uniform(
    members: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    let all = subscribed_partitions(members, topics);
    // What each member had and may still have, each partition kept by one member at most.
    let mut taken: BTreeSet<(String, i32)> = BTreeSet::new();
    let mut kept: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    for (member, subscribed) in members {
        let mut mine = Vec::new();
        for (topic, partitions) in previous.get(member).into_iter().flatten() {
            let count = topics.get(topic).copied().unwrap_or(0);
            if !subscribed.contains(topic) {
                continue;
            }
            for &p in partitions {
                if p < count && taken.insert((topic.clone(), p)) {
                    mine.push((topic.clone(), p));
                }
            }
        }
        kept.insert(member.clone(), mine);
    }
    let homogeneous = members.values().collect::<BTreeSet<_>>().len() <= 1;
    let mut assignment = if homogeneous {
        uniform_homogeneous(members, &all, kept)
    } else {
        uniform_heterogeneous(members, &all, kept)
    };
    members
        .keys()
        .map(|m| {
            let mut partitions = Partitions::new();
            for (t, p) in assignment.remove(m).unwrap_or_default() {
                partitions.entry(t).or_default().insert(p);
            }
            (m.clone(), partitions)
        })
        .collect()
}

/// Every member subscribes to the same topics: quotas are known up front (the members keeping
/// the most get the extra ones), each member keeps up to its quota, the rest is dealt out.
fn uniform_homogeneous(
    members: &BTreeMap<String, BTreeSet<String>>,
    all: &[(String, i32)],
    mut kept: BTreeMap<String, Vec<(String, i32)>>,
) -> BTreeMap<String, Vec<(String, i32)>> {
    let n = members.len().max(1);
    let (base, extra) = (all.len() / n, all.len() % n);
    let mut order: Vec<&String> = members.keys().collect();
    order.sort_by_key(|m| std::cmp::Reverse(kept.get(*m).map_or(0, Vec::len)));
    let quota: BTreeMap<&String, usize> = order
        .into_iter()
        .enumerate()
        .map(|(i, m)| (m, base + usize::from(i < extra)))
        .collect();
    for (member, mine) in kept.iter_mut() {
        mine.truncate(quota.get(member).copied().unwrap_or(0));
    }
    let held: BTreeSet<(String, i32)> = kept.values().flatten().cloned().collect();
    let mut free = all.iter().filter(|p| !held.contains(*p)).cloned();
    for (member, mine) in kept.iter_mut() {
        let want = quota.get(member).copied().unwrap_or(0);
        while mine.len() < want {
            match free.next() {
                Some(p) => mine.push(p),
                None => break,
            }
        }
    }
    kept
}

/// Members subscribe to different topics: each free partition goes to the subscriber with the
/// fewest, then partitions move from the fullest members to emptier subscribers until no move
/// narrows the gap (each move lowers the sum of squared counts, so this ends).
fn uniform_heterogeneous(
    members: &BTreeMap<String, BTreeSet<String>>,
    all: &[(String, i32)],
    mut kept: BTreeMap<String, Vec<(String, i32)>>,
) -> BTreeMap<String, Vec<(String, i32)>> {
    let held: BTreeSet<(String, i32)> = kept.values().flatten().cloned().collect();
    for partition in all.iter().filter(|p| !held.contains(p)) {
        let fewest = members
            .iter()
            .filter(|(_, s)| s.contains(&partition.0))
            .map(|(m, _)| m)
            .min_by_key(|m| kept.get(*m).map_or(0, Vec::len));
        if let Some(member) = fewest {
            kept.entry(member.clone())
                .or_default()
                .push(partition.clone());
        }
    }
    loop {
        let mut by_count: Vec<(String, usize)> =
            kept.iter().map(|(m, ps)| (m.clone(), ps.len())).collect();
        by_count.sort_by_key(|(_, c)| *c);
        let moved = by_count.iter().rev().find_map(|(hi, hi_count)| {
            by_count
                .iter()
                .take_while(|(_, lo_count)| lo_count + 1 < *hi_count)
                .find_map(|(lo, _)| {
                    let subscribed = members.get(lo)?;
                    let index = kept
                        .get(hi)?
                        .iter()
                        .position(|(t, _)| subscribed.contains(t))?;
                    Some((hi.clone(), lo.clone(), index))
                })
        });
        let Some((hi, lo, index)) = moved else {
            return kept;
        };
        if let Some(partition) = kept.get_mut(&hi).map(|ps| ps.remove(index)) {
            kept.entry(lo).or_default().push(partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriptions(spec: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        spec.iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn count(a: &Partitions) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every subscribed partition is assigned exactly once, to a subscriber.
    fn assert_complete(
        members: &BTreeMap<String, BTreeSet<String>>,
        topics: &BTreeMap<String, i32>,
        out: &BTreeMap<String, Partitions>,
    ) {
        let mut seen = BTreeSet::new();
        for (m, parts) in out {
            for (t, ps) in parts {
                assert!(
                    members[m].contains(t),
                    "{m} got {t} it does not subscribe to"
                );
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} assigned twice");
                }
            }
        }
        assert_eq!(
            seen,
            subscribed_partitions(members, topics).into_iter().collect()
        );
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can_when_a_member_leaves_and_one_joins() {
        let topics = BTreeMap::from([("a".to_string(), 6), ("b".to_string(), 5)]);
        let three = subscriptions(&[
            ("m1", &["a", "b"]),
            ("m2", &["a", "b"]),
            ("m3", &["a", "b"]),
        ]);
        let first = Assignor::Uniform.assign(&three, &topics, &BTreeMap::new());
        assert_complete(&three, &topics, &first);
        let counts: Vec<usize> = first.values().map(count).collect();
        assert!(counts.iter().all(|c| *c == 3 || *c == 4), "{counts:?}");
        // m3 leaves: m1 and m2 keep all they had and share m3's.
        let two = subscriptions(&[("m1", &["a", "b"]), ("m2", &["a", "b"])]);
        let second = Assignor::Uniform.assign(&two, &topics, &first);
        assert_complete(&two, &topics, &second);
        for m in ["m1", "m2"] {
            for (t, ps) in &first[m] {
                assert!(ps.is_subset(&second[m][t]), "{m} lost some of {t}");
            }
        }
        // m4 joins: it takes a share, the others give up only that much.
        let again = subscriptions(&[
            ("m1", &["a", "b"]),
            ("m2", &["a", "b"]),
            ("m4", &["a", "b"]),
        ]);
        let third = Assignor::Uniform.assign(&again, &topics, &second);
        assert_complete(&again, &topics, &third);
        let moved: usize = ["m1", "m2"]
            .iter()
            .map(|m| count(&second[*m]) - count(&third[*m]))
            .sum();
        assert_eq!(moved, count(&third["m4"]));
        assert!((3..=4).contains(&count(&third["m4"])));
    }

    #[test]
    fn uniform_with_different_subscriptions_gives_each_topic_only_to_its_subscribers() {
        let topics = BTreeMap::from([("a".to_string(), 4), ("b".to_string(), 4)]);
        let members = subscriptions(&[("m1", &["a"]), ("m2", &["a", "b"]), ("m3", &["b"])]);
        let out = Assignor::Uniform.assign(&members, &topics, &BTreeMap::new());
        assert_complete(&members, &topics, &out);
        let counts: Vec<usize> = out.values().map(count).collect();
        assert!(
            counts.iter().max().expect("some") - counts.iter().min().expect("some") <= 1,
            "{counts:?}"
        );
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic_in_member_order() {
        let topics = BTreeMap::from([("a".to_string(), 5), ("b".to_string(), 5)]);
        let members = subscriptions(&[("m1", &["a", "b"]), ("m2", &["a", "b"])]);
        let out = Assignor::Range.assign(&members, &topics, &BTreeMap::new());
        assert_complete(&members, &topics, &out);
        assert_eq!(out["m1"]["a"], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["m2"]["a"], BTreeSet::from([3, 4]));
        assert_eq!(out["m1"]["b"], out["m1"]["a"]);
    }

    #[test]
    fn topics_that_do_not_exist_are_skipped() {
        let topics = BTreeMap::from([("a".to_string(), 2)]);
        let members = subscriptions(&[("m1", &["a", "missing"])]);
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let out = assignor.assign(&members, &topics, &BTreeMap::new());
            assert_eq!(out["m1"].keys().collect::<Vec<_>>(), vec!["a"]);
        }
    }
}
