//! What a failover would do, and a failover of several topics at one point in time
//! (docs/failover.md, "Rehearsing a failover" and "A consistent cut").
//!
//! `--failover --dry-run` prints, per partition, what a stop now would do, and changes nothing:
//! where it cuts (the last stable offset, or lower to leave no transaction without its end),
//! the records and open transactions that cut removes, the records of the source it lacks (its
//! high watermark less the cut) and the lag in time (the recovery point: how old the newest
//! source record the destination may lack is), and whether the source answered. The brokers
//! count the cut with the same code the stop cuts with ([`kmirror_actors::host::stop_cut`]), so
//! once nothing moves (the source gone, the topics paused) the prediction is the stop's, record
//! for record.
//!
//! `--failover --consistent` stops a set of topics at one point in time T: the newest source
//! time every partition of the set has mirrored through (its `MirroredThroughMs`: the last
//! fetch answer that found it caught up, or the newest record it copied while behind). It
//! pauses the topics first, so nothing moves between the count and the stop, computes T, and
//! asks every broker what cutting each partition before its first batch newer than T removes
//! beyond what a plain stop removes. That many records need `--discard-records N` (as a restart
//! needs `--discard-local-writes`); without it, or with another number, the command resumes the
//! topics it paused and changes nothing. Then it stops them with T (StopMirrorTopics'
//! `CutTimestampMs`, kept in the topics' metadata so a STOPPING resumed after a crash cuts the
//! same), and waits until they are STOPPED. With `--dry-run` it reports T and the cut without
//! pausing. Run again after a crash that stopped some topics of the set and not others, it cuts
//! the others at the point the first ones were stopped at (DescribeMirrors'
//! `StopCutTimestampMs`).

use super::failover::{Failover, Row, Scope, await_state, await_stopped, report_stopped, stop};
use super::failure::Failure;
use super::topics::{TopicChange, change_topics};
use std::fmt::Write;

/// `--failover --dry-run [--consistent]`: the table (or `--json`), nothing changed.
pub(crate) async fn dry_run(scope: &Scope<'_>, failover: &Failover) -> Result<(), Failure> {
    let now = super::failover::now_ms();
    let (rows, point) = if failover.consistent {
        let rows = scope.rows(None).await?;
        let point = consistent_point(&rows)?;
        (scope.rows(Some(Some(point))).await?, Some(point))
    } else {
        (scope.rows(Some(None)).await?, None)
    };
    if failover.json {
        let json: Vec<serde_json::Value> = rows.iter().map(|r| row_json(r, now)).collect();
        let out = serde_json::json!({
            "consistentPointMs": point,
            "partitions": json,
        });
        println!("{out}");
        return Ok(());
    }
    print!("{}", table(&rows, now));
    let records: i64 = rows.iter().map(|r| r.cut_records.max(0)).sum();
    let open: i64 = rows.iter().map(|r| r.cut_open_transactions.max(0)).sum();
    if let Some(point) = point {
        println!(
            "consistent point: {} ({point} ms): no partition keeps a record newer than it",
            utc(point)
        );
    }
    println!(
        "a stop now removes {records} records ({open} open transactions) from the destination; \
         dry run: nothing was changed"
    );
    Ok(())
}

/// `--failover --consistent`: pause, find the point, check the confirmation, stop at it. Topics
/// of the set a consistent stop already stopped (the command ran before and the broker taking
/// the stop crashed between topics) keep their point: the others are stopped at it.
pub(crate) async fn consistent_stop(
    scope: &Scope<'_>,
    failover: &Failover,
    patterns: Vec<String>,
) -> Result<(), Failure> {
    let rows = scope.rows(None).await?;
    let stopped = |r: &Row| r.state == "STOPPED" || r.state == "STOPPING";
    let mut points: Vec<i64> = rows
        .iter()
        .filter(|r| stopped(r))
        .map(|r| r.stopped_at_ms)
        .collect();
    points.sort_unstable();
    points.dedup();
    let earlier = match points.as_slice() {
        [] => None,
        [point] if *point >= 0 => Some(*point),
        _ => {
            let r = rows.iter().find(|r| stopped(r)).expect("a stopped row");
            return Err(Failure::Refused(format!(
                "{}-{} is {} without this set's point in time (stopped alone, or at another \
                 point): the set cannot be cut at one point; nothing was changed",
                r.topic, r.partition, r.state
            )));
        }
    };
    let remaining: Vec<String> = {
        let mut topics: Vec<String> = rows
            .iter()
            .filter(|r| !stopped(r))
            .map(|r| r.topic.clone())
            .collect();
        topics.dedup();
        topics
    };
    if remaining.is_empty() {
        println!("every topic of the set is stopped already");
        return await_stopped(scope, failover.timeout).await;
    }
    let rest = Scope {
        topics: &remaining,
        ..*scope
    };
    // Frozen first: paused partitions fetch nothing, so the count is what the stop cuts.
    let paused_here: Vec<String> = {
        let mut topics: Vec<String> = rows
            .iter()
            .filter(|r| !stopped(r) && r.state != "PAUSED" && r.state != "PAUSING")
            .map(|r| r.topic.clone())
            .collect();
        topics.dedup();
        topics
    };
    change(&rest, TopicChange::Pause, &paused_here).await?;
    let outcome = async {
        await_state(&rest, "PAUSED", failover.timeout).await?;
        let point = match earlier {
            Some(point) => {
                println!(
                    "topics of the set are stopped at {} already: the others are cut there",
                    utc(point)
                );
                point
            }
            None => consistent_point(&rest.rows(None).await?)?,
        };
        let plain = rest.rows(Some(None)).await?;
        let cut = rest.rows(Some(Some(point))).await?;
        let beyond = beyond_plain_cut(&plain, &cut)?;
        print!("{}", table(&cut, super::failover::now_ms()));
        println!(
            "consistent point: {} ({point} ms): no partition keeps a record newer than it",
            utc(point)
        );
        if beyond > 0 && failover.discard_records != Some(beyond) {
            return Err(Failure::Refused(format!(
                "cutting every topic at {} removes {beyond} records besides those a plain stop \
                 removes (the partitions above); nothing was stopped. To cut them, run again \
                 with --discard-records {beyond}",
                utc(point)
            )));
        }
        Ok(point)
    }
    .await;
    let point = match outcome {
        Ok(point) => point,
        Err(refusal) => {
            // Left as they were found: the topics this command paused mirror again.
            if let Err(e) = change(&rest, TopicChange::Resume, &paused_here).await {
                eprintln!(
                    "kmirror mirrors: resuming the topics paused for the cut: {e:?} (resume \
                     them with --resume)"
                );
            }
            return Err(refusal);
        }
    };
    report_stopped(stop(&rest, point, patterns).await?)?;
    await_stopped(scope, failover.timeout).await
}

/// Pauses or resumes `topics` of the scope's mirror; a refusal of any is the command's.
async fn change(scope: &Scope<'_>, change: TopicChange, topics: &[String]) -> Result<(), Failure> {
    if topics.is_empty() {
        return Ok(());
    }
    let (code, message, per_topic) = change_topics(
        scope.connection,
        change,
        scope.mirror.to_string(),
        topics.to_vec(),
        Vec::new(),
    )
    .await
    .map_err(|e| Failure::Unreachable(e.to_string()))?;
    if code != 0 {
        return Err(super::failure::refused(code, message));
    }
    match per_topic.into_iter().find(|(_, code, _)| *code != 0) {
        Some((topic, code, message)) => Err(super::failure::refused(
            code,
            Some(format!("{topic}: {}", message.unwrap_or_default())),
        )),
        None => Ok(()),
    }
}

/// The newest source time every partition has mirrored through; refused when one does not say
/// (nothing fetched since its broker started and an empty log, or not described).
fn consistent_point(rows: &[Row]) -> Result<i64, Failure> {
    if rows.is_empty() {
        return Err(Failure::Refused("the topics have no partitions".into()));
    }
    match rows.iter().find(|r| r.mirrored_through_ms < 0) {
        Some(r) => Err(Failure::Refused(format!(
            "{}-{} ({}) does not say up to when it holds the source's records ({}): no \
             consistent point; nothing was changed",
            r.topic,
            r.partition,
            r.state,
            r.error.as_deref().unwrap_or("nothing mirrored yet")
        ))),
        None => Ok(rows
            .iter()
            .map(|r| r.mirrored_through_ms)
            .min()
            .unwrap_or_default()),
    }
}

/// The records the consistent cut removes beyond the plain one, over every partition; both
/// must be known for each.
fn beyond_plain_cut(plain: &[Row], cut: &[Row]) -> Result<i64, Failure> {
    let mut beyond = 0;
    for row in cut {
        let base = plain
            .iter()
            .find(|p| p.topic == row.topic && p.partition == row.partition)
            .map_or(-1, |p| p.cut_records);
        if row.cut_records < 0 || base < 0 {
            return Err(Failure::Refused(format!(
                "{}-{}: its broker did not say where a stop cuts it ({}); nothing was stopped",
                row.topic,
                row.partition,
                row.error.as_deref().unwrap_or("not described")
            )));
        }
        beyond += (row.cut_records - base).max(0);
    }
    Ok(beyond)
}

/// A figure, or `-` when not known.
fn known(value: i64) -> String {
    if value < 0 {
        "-".into()
    } else {
        value.to_string()
    }
}

/// The records of the source a stop now leaves behind: its high watermark less the cut.
fn lost(row: &Row) -> i64 {
    if row.high_watermark < 0 || row.cut_offset < 0 {
        -1
    } else {
        (row.high_watermark - row.cut_offset).max(0)
    }
}

/// Whether the source answered for the partition now.
fn source_note(row: &Row) -> String {
    match (row.high_watermark >= 0, row.state.as_str()) {
        (true, _) => "reachable".into(),
        (false, "STOPPED" | "STOPPING") => "not asked (failed over already)".into(),
        (false, _) => row
            .error
            .clone()
            .unwrap_or_else(|| "did not answer".to_string()),
    }
}

/// The dry run's table.
fn table(rows: &[Row], now: i64) -> String {
    let mut out = format!(
        "{:<24} {:>9} {:<10} {:>12} {:>12} {:>12} {:>10} {:>9} {:>11} {:>9}  SOURCE\n",
        "TOPIC",
        "PARTITION",
        "STATE",
        "SRC-HW",
        "DEST-LSO",
        "CUT-AT",
        "CUT-RECS",
        "OPEN-TXNS",
        "LOST-RECS",
        "RPO",
    );
    for r in rows {
        let rpo = match r.lag_ms(now) {
            ..0 => "-".to_string(),
            ms => format!("{:.1}s", ms as f64 / 1e3),
        };
        let _ = writeln!(
            out,
            "{:<24} {:>9} {:<10} {:>12} {:>12} {:>12} {:>10} {:>9} {:>11} {:>9}  {}",
            r.topic,
            r.partition,
            r.state,
            known(r.high_watermark),
            known(r.destination_stable),
            known(r.cut_offset),
            known(r.cut_records),
            known(r.cut_open_transactions),
            known(lost(r)),
            rpo,
            source_note(r)
        );
    }
    out
}

/// One partition of `--dry-run --json` (`null` for a figure not known).
fn row_json(r: &Row, now: i64) -> serde_json::Value {
    let or_null = |v: i64| (v >= 0).then_some(v);
    serde_json::json!({
        "topic": r.topic,
        "partition": r.partition,
        "state": r.state,
        "sourceHighWatermark": or_null(r.high_watermark),
        "destinationLastStableOffset": or_null(r.destination_stable),
        "destinationOffset": or_null(r.destination_offset),
        "cutOffset": or_null(r.cut_offset),
        "cutRecords": or_null(r.cut_records),
        "openTransactions": or_null(r.cut_open_transactions),
        "lostRecords": or_null(lost(r)),
        "mirroredThroughMs": or_null(r.mirrored_through_ms),
        "lagMs": or_null(r.lag_ms(now)),
        "sourceReachable": r.high_watermark >= 0,
        "note": r.error,
    })
}

/// `ms` since the epoch as UTC, `2026-12-05T01:43:20.123Z`.
pub(crate) fn utc(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_796_435_000_123), "2026-12-05T01:43:20.123Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    fn row(topic: &str, through: i64, cut_records: i64) -> Row {
        Row {
            topic: topic.into(),
            state: "PAUSED".into(),
            mirrored_through_ms: through,
            cut_records,
            ..Row::default()
        }
    }

    /// The point is the oldest of the partitions' mirrored-through times: every partition
    /// holds the source's records up to it. One that cannot say refuses the cut.
    #[test]
    fn the_consistent_point_is_the_oldest_mirrored_through() {
        let rows = [row("orders", 5_000, 0), row("payments", 3_000, 0)];
        assert!(matches!(consistent_point(&rows), Ok(3_000)));
        let unknown = [row("orders", 5_000, 0), row("payments", -1, 0)];
        let Err(Failure::Refused(why)) = consistent_point(&unknown) else {
            panic!("refused");
        };
        assert!(why.contains("payments-0"), "{why}");
    }

    #[test]
    fn only_records_beyond_the_plain_cut_need_confirming() {
        let plain = [row("orders", 0, 3), row("payments", 0, 0)];
        let cut = [row("orders", 0, 5), row("payments", 0, 7)];
        assert!(matches!(beyond_plain_cut(&plain, &cut), Ok(9)));
        let unknown = [row("orders", 0, -1), row("payments", 0, 7)];
        assert!(beyond_plain_cut(&plain, &unknown).is_err());
    }
}
