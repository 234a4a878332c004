// Package quartz reads cron expressions as Quartz's CronExpression (2.3.2,
// the version ElasticJob 3.x runs; 2.4.0 computes the same) reads them, and
// computes their fire times as it does, so that a job moved from ElasticJob
// to shardflow fires at the same instants.
//
// The syntax: six or seven fields separated by spaces or tabs, seconds,
// minutes, hours, day-of-month, month (1-12 or JAN-DEC), day-of-week (1-7
// counting 1=SUN..7=SAT, or SUN-SAT) and an optional year; "*", "?" (in one
// of the two day fields, which must be used in exactly one of them), ranges
// "a-b" that may wrap ("22-2", "FRI-MON", "NOV-FEB"), steps "a/n" and
// "*/n", lists, "L" (last day of the month; alone in day-of-week it means
// 7, Saturday), "L-n", "W" ("15W": the weekday nearest the 15th, within the
// month), "LW", "nL" (the last day n of the month) and "n#k" (the k-th day
// n of the month).
//
// Quartz's quirks are kept, since jobs rely on what Quartz does, not on
// what its documentation says:
//   - a step after a name is ignored: "MON/2" is every Monday, "MON-FRI/2"
//     every weekday, "JAN/3" January;
//   - a range step of 0 keeps only the start ("5-10/0" is 5), and range
//     steps are not checked against the field ("0-59/90" is 0), where "a/n"
//     and "*/n" steps larger than the field are refused;
//   - characters after a complete value are ignored ("5X" is 5, "JANUARY"
//     is JAN), as are fields after the seventh;
//   - with a list in day-of-week, "#" and "L" apply to the lowest day;
//   - on the night clocks go back, a wall time in the repeated hour means
//     its second, standard-time occurrence, so a daily "0 30 1 * * ?" fires
//     once; on the night clocks go forward, a fire time in the skipped hour
//     is skipped when its hour no longer matches ("0 30 2 * * ?" does not
//     fire that day in New York) and moves with the clock when it still
//     does (in Lord Howe's half-hour shift, "0 0 2 * * ?" would land on
//     02:30 but its minute no longer matches, so it is skipped too).
//
// Differences from Quartz, all about expressions Quartz accepts but cannot
// use: a field that selects no value at all ("L" in the seconds field) is
// refused here, where Quartz accepts it and then throws when a trigger asks
// for a fire time; an expression whose search Quartz never ends ("0W") has
// no fire time here; bytes outside ASCII are refused.
package quartz
