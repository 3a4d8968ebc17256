//! Aggregate statistics (`MXAggregateProfileStatsPrintEx`): per category and name, the count,
//! total, min, max and average of durations (µs, printed in ms) and counters (bytes, printed in kB
//! for the memory categories).

use super::buffer::{Payload, Record};
use super::trace::escape_json;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// Output format (`format` argument: 0 table, 1 json).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

impl Format {
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(Format::Table),
            1 => Ok(Format::Json),
            _ => Err(Error::invalid(format!(
                "Invalid value for parameter format: {code} (accepted: 0 table, 1 json)"
            ))),
        }
    }
}

/// Sort key (`sort_by` argument: 0 total, 1 avg, 2 min, 3 max, 4 count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    Total,
    Avg,
    Min,
    Max,
    Count,
}

impl SortBy {
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(SortBy::Total),
            1 => Ok(SortBy::Avg),
            2 => Ok(SortBy::Min),
            3 => Ok(SortBy::Max),
            4 => Ok(SortBy::Count),
            _ => Err(Error::invalid(format!(
                "Invalid value for parameter sort_by: {code} (accepted: 0 total, 1 avg, 2 min, 3 max, 4 count)"
            ))),
        }
    }
}

/// Whether a statistic summarises durations or counter values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    Duration,
    Counter,
}

/// One (category, name) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub kind: StatKind,
    pub count: u64,
    /// Durations: the sum (µs). Counters: the last value (as MXNet keeps it).
    pub total: u64,
    pub min: u64,
    pub max: u64,
}

impl Stat {
    /// Average as MXNet prints it: total / count for durations; (max - min) / 2 for counters
    /// (MXNet's formula, kept for compatibility).
    pub fn avg(&self) -> f64 {
        match self.kind {
            StatKind::Duration => self.total as f64 / self.count as f64,
            StatKind::Counter => (self.max as f64 - self.min as f64) / 2.0,
        }
    }
    fn sort_value(&self, by: SortBy) -> f64 {
        match by {
            SortBy::Total => self.total as f64,
            SortBy::Avg => self.avg(),
            SortBy::Min => self.min as f64,
            SortBy::Max => self.max as f64,
            SortBy::Count => self.count as f64,
        }
    }
}

/// The accumulator.
#[derive(Default, Debug)]
pub struct AggregateStats {
    stats: BTreeMap<String, HashMap<String, Stat>>,
}

/// True for the categories whose values are bytes.
fn is_memory(category: &str) -> bool {
    category == "Device Storage" || category == "Pool Memory"
}

impl AggregateStats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one record (if it is an aggregated duration or counter).
    pub fn add(&mut self, r: &Record) {
        if !r.aggregate {
            return;
        }
        let (kind, value) = match r.payload {
            Payload::Duration { start, end, .. } => (StatKind::Duration, end.saturating_sub(start)),
            Payload::Counter { value, .. } => (StatKind::Counter, value),
            Payload::Marker { .. } => return,
        };
        let by_name = self.stats.entry(r.category.text()).or_default();
        let s = match by_name.get_mut(&*r.name) {
            Some(s) => s,
            None => by_name.entry(r.name.to_string()).or_insert(Stat {
                kind,
                count: 0,
                total: 0,
                min: u64::MAX,
                max: 0,
            }),
        };
        s.count += 1;
        match kind {
            StatKind::Duration => s.total += value,
            StatKind::Counter => s.total = value,
        }
        s.min = s.min.min(value);
        s.max = s.max.max(value);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.stats.clear();
    }

    /// Looks up one entry.
    pub fn get(&self, category: &str, name: &str) -> Option<&Stat> {
        self.stats.get(category)?.get(name)
    }

    /// Entries of one category in print order: by the sort value, largest first (smallest first
    /// when `ascending`); ties by name, in the same direction.
    fn sorted(map: &HashMap<String, Stat>, by: SortBy, ascending: bool) -> Vec<(&str, &Stat)> {
        let mut v: Vec<(&str, &Stat)> = map.iter().map(|(n, s)| (n.as_str(), s)).collect();
        v.sort_by(|a, b| {
            let o =
                a.1.sort_value(by)
                    .total_cmp(&b.1.sort_value(by))
                    .then_with(|| a.0.cmp(b.0));
            if ascending { o } else { o.reverse() }
        });
        v
    }

    /// Prints the stats in `format`.
    pub fn print(&self, format: Format, by: SortBy, ascending: bool) -> String {
        match format {
            Format::Table => self.table(by, ascending),
            Format::Json => self.json(by, ascending),
        }
    }

    /// MXNet's table layout.
    pub fn table(&self, by: SortBy, ascending: bool) -> String {
        let mut s = String::new();
        s.push_str(
            "\nProfile Statistics:\n\tNote the difference in units for different entries.\n",
        );
        for (cat, map) in &self.stats {
            let mem = is_memory(cat);
            let _ = writeln!(s, "{cat}\n=================");
            if mem {
                let _ = writeln!(
                    s,
                    "{:<25}{:>16} {:>16} {:>16} {:>16}",
                    "Name", "Total Count", "Min Use  (kB)", "Max Use  (kB)", "Avg Use  (kB)"
                );
                let _ = writeln!(
                    s,
                    "{:<25}{:>16} {:>16} {:>16} {:>16}",
                    "----", "-----------", "-------------", "-------------", "-------------"
                );
            } else {
                let _ = writeln!(
                    s,
                    "{:<25}{:>16} {:>16} {:>16} {:>16} {:>16}",
                    "Name",
                    "Total Count",
                    "Time (ms)",
                    "Min Time (ms)",
                    "Max Time (ms)",
                    "Avg Time (ms)"
                );
                let _ = writeln!(
                    s,
                    "{:<25}{:>16} {:>16} {:>16} {:>16} {:>16}",
                    "----",
                    "-----------",
                    "---------",
                    "-------------",
                    "-------------",
                    "-------------"
                );
            }
            for (name, st) in Self::sorted(map, by, ascending) {
                let _ = write!(s, "{name:<25}{:>16} ", st.count);
                if !mem {
                    let _ = write!(s, "{:>16.4} ", st.total as f64 / 1000.0);
                }
                let _ = writeln!(
                    s,
                    "{:>16.4} {:>16.4} {:>16.4}",
                    st.min as f64 / 1000.0,
                    st.max as f64 / 1000.0,
                    st.avg() / 1000.0
                );
            }
            s.push('\n');
        }
        s
    }

    /// `{"Time": {cat: {name: {...}}}, "Memory": {...}, "Unit": {"Time": "ms", "Memory": "kB"}}`.
    pub fn json(&self, by: SortBy, ascending: bool) -> String {
        let mut time = Vec::new();
        let mut memory = Vec::new();
        for (cat, map) in &self.stats {
            let mem = is_memory(cat);
            let mut entries = Vec::new();
            for (name, st) in Self::sorted(map, by, ascending) {
                let mut e = format!("            \"{}\": {{\n", escape_json(name));
                let _ = writeln!(e, "                \"Count\": {},", st.count);
                if !mem {
                    let _ = writeln!(
                        e,
                        "                \"Total\": {:.4},",
                        st.total as f64 / 1000.0
                    );
                }
                let _ = writeln!(e, "                \"Min\": {:.4},", st.min as f64 / 1000.0);
                let _ = writeln!(e, "                \"Max\": {:.4},", st.max as f64 / 1000.0);
                let _ = writeln!(e, "                \"Avg\": {:.4}", st.avg() / 1000.0);
                e.push_str("            }");
                entries.push(e);
            }
            let block = format!(
                "        \"{}\": {{\n{}\n        }}",
                escape_json(cat),
                entries.join(",\n")
            );
            if mem {
                memory.push(block)
            } else {
                time.push(block)
            }
        }
        let section = |v: Vec<String>| {
            if v.is_empty() {
                String::new()
            } else {
                format!("{}\n", v.join(",\n"))
            }
        };
        format!(
            "{{\n    \"Time\": {{\n{}    }},\n    \"Memory\": {{\n{}    }},\n    \"Unit\": {{\n        \"Time\": \"ms\",\n        \"Memory\": \"kB\"\n    }}\n}}\n",
            section(time),
            section(memory)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::buffer::{Category, Style};
    use super::*;

    fn dur(name: &str, us: u64) -> Record {
        Record {
            name: name.into(),
            category: Category::Operator,
            device: None,
            tid: 1,
            payload: Payload::Duration {
                start: 100,
                end: 100 + us,
                style: Style::Sync,
            },
            aggregate: true,
            arg: None,
        }
    }

    #[test]
    fn durations_and_counters() {
        let mut a = AggregateStats::new();
        for us in [1000, 3000, 2000] {
            a.add(&dur("add", us));
        }
        a.add(&dur("mul", 500));
        let st = a.get("operator", "add").unwrap();
        assert_eq!((st.count, st.total, st.min, st.max), (3, 6000, 1000, 3000));
        assert_eq!(st.avg(), 2000.0);
        let mut c = dur("Memory: cpu/0", 0);
        c.category = Category::Storage;
        for v in [4096, 1024, 8192] {
            c.payload = Payload::Counter { ts: 1, value: v };
            a.add(&c);
        }
        let st = a.get("Device Storage", "Memory: cpu/0").unwrap();
        assert_eq!((st.count, st.total, st.min, st.max), (3, 8192, 1024, 8192));
        assert_eq!(st.avg(), 3584.0);
        let t = a.table(SortBy::Total, false);
        assert!(t.contains("add                                     3           6.0000           1.0000           3.0000           2.0000"), "{t}");
        assert!(t.contains("Memory: cpu/0                           3           1.0240           8.1920           3.5840"), "{t}");
        assert!(t.find("add").unwrap() < t.find("mul").unwrap());
        let t = a.table(SortBy::Total, true);
        assert!(t.find("add").unwrap() > t.find("mul").unwrap());
        a.clear();
        assert!(a.get("operator", "add").is_none());
    }

    #[test]
    fn bad_codes() {
        assert!(Format::from_code(2).is_err());
        assert!(
            SortBy::from_code(5)
                .unwrap_err()
                .message()
                .contains("sort_by")
        );
        assert!(SortBy::from_code(-1).is_err());
    }
}
