//! The Chrome trace-event JSON file.
//!
//! The file is kept valid after every dump: it always ends with the closing tail
//! (`]`, `"displayTimeUnit"`, `}`); a later dump seeks back to where the tail starts, writes the
//! new records and writes the tail again. Process and thread names are written as `M` (metadata)
//! records the first time a pid or (pid, tid) appears.

use super::buffer::{Payload, Record, Style};
use crate::{Context, DeviceType};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const HEADER: &str = "{\n\"traceEvents\": [\n";
const TAIL: &str = "\n],\n\"displayTimeUnit\": \"ms\"\n}\n";

/// Escapes `s` for use inside a JSON string literal.
pub fn escape_json(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The trace pid of a device: cpu(i) -> i, gpu(i) -> 100 + i, cpu_pinned(i) -> 200 + i,
/// cpu_shared(i) -> 300 + i. Categories without a device get pids from 1000 on.
pub fn device_pid(ctx: Context) -> u32 {
    let base = match ctx.dev_type {
        DeviceType::Cpu => 0,
        DeviceType::Gpu => 100,
        DeviceType::CpuPinned => 200,
        DeviceType::CpuShared => 300,
    };
    base + ctx.dev_id.max(0) as u32
}

/// The process name of a device pid, as MXNet names them (`cpu/0`, `gpu/1`, `cpu pinned/0`,
/// `cpu shared/0`).
pub fn device_name(ctx: Context) -> String {
    match ctx.dev_type {
        DeviceType::Cpu => format!("cpu/{}", ctx.dev_id),
        DeviceType::Gpu => format!("gpu/{}", ctx.dev_id),
        DeviceType::CpuPinned => format!("cpu pinned/{}", ctx.dev_id),
        DeviceType::CpuShared => format!("cpu shared/{}", ctx.dev_id),
    }
}

/// One interval as drawn on the timeline.
#[derive(Clone, Debug)]
pub struct Bar {
    pub process: String,
    pub pid: u32,
    pub tid: u32,
    pub name: std::sync::Arc<str>,
    pub start: u64,
    pub end: u64,
}

/// State of one trace file.
pub struct TraceWriter {
    path: PathBuf,
    file: Option<File>,
    /// Offset where the tail starts.
    tail_pos: u64,
    wrote_any: bool,
    named_pids: HashSet<u32>,
    named_tids: HashSet<(u32, u32)>,
    category_pids: HashMap<String, u32>,
    thread_names: HashMap<u32, String>,
    next_id: u64,
    /// Intervals kept for the timeline (only when `keep_bars`).
    pub bars: Vec<Bar>,
    pub keep_bars: bool,
}

impl TraceWriter {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TraceWriter {
            path: path.into(),
            file: None,
            tail_pos: 0,
            wrote_any: false,
            named_pids: HashSet::new(),
            named_tids: HashSet::new(),
            category_pids: HashMap::new(),
            thread_names: HashMap::new(),
            next_id: 1,
            bars: Vec::new(),
            keep_bars: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remembers thread names for the metadata records.
    pub fn note_threads(&mut self, names: &[(u32, String)]) {
        for (tid, name) in names {
            self.thread_names
                .entry(*tid)
                .or_insert_with(|| name.clone());
        }
    }

    fn pid_of(&mut self, r: &Record, out: &mut String) -> u32 {
        let (pid, pname) = match r.device {
            Some(ctx) => (device_pid(ctx), None),
            None => {
                let cat = r.category.text();
                let n = self.category_pids.len() as u32;
                let pid = *self.category_pids.entry(cat.clone()).or_insert(1000 + n);
                (pid, Some(cat))
            }
        };
        if self.named_pids.insert(pid) {
            let name = match (r.device, pname) {
                (Some(ctx), _) => device_name(ctx),
                (None, Some(n)) => n,
                (None, None) => unreachable!(),
            };
            let _ = writeln!(
                out,
                "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {pid}, \"args\": {{\"name\": \"{}\"}}}},",
                escape_json(&name)
            );
        }
        if self.named_tids.insert((pid, r.tid)) {
            let tname = self
                .thread_names
                .get(&r.tid)
                .cloned()
                .unwrap_or_else(|| format!("thread {}", r.tid));
            let _ = writeln!(
                out,
                "{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {pid}, \"tid\": {}, \"args\": {{\"name\": \"{}\"}}}},",
                r.tid,
                escape_json(&tname)
            );
        }
        pid
    }

    /// Renders one record (preceded by any metadata it needs) as lines ending in `,\n`.
    fn render(&mut self, r: &Record, out: &mut String) {
        let pid = self.pid_of(r, out);
        let name = escape_json(&r.name);
        let cat = escape_json(&r.category.text());
        let tid = r.tid;
        let args = match &r.arg {
            Some((k, v)) => format!(", \"args\": {{\"{}\": \"{}\"}}", k, escape_json(v)),
            None => String::new(),
        };
        match r.payload {
            Payload::Duration { start, end, style } => {
                let (b, e, id) = match style {
                    Style::Sync => ("B", "E", String::new()),
                    Style::Context => ("(", ")", String::new()),
                    Style::Async => {
                        let id = self.next_id;
                        self.next_id += 1;
                        ("b", "e", format!(", \"id\": {id}"))
                    }
                };
                for (ph, ts) in [(b, start), (e, end)] {
                    let _ = writeln!(
                        out,
                        "{{\"name\": \"{name}\", \"cat\": \"{cat}\", \"ph\": \"{ph}\", \"ts\": {ts}{id}, \"pid\": {pid}, \"tid\": {tid}{args}}},"
                    );
                }
                if self.keep_bars && style == Style::Sync {
                    let process = match r.device {
                        Some(ctx) => device_name(ctx),
                        None => r.category.text(),
                    };
                    self.bars.push(Bar {
                        process,
                        pid,
                        tid,
                        name: r.name.clone(),
                        start,
                        end,
                    });
                }
            }
            Payload::Counter { ts, value } => {
                let _ = writeln!(
                    out,
                    "{{\"name\": \"{name}\", \"cat\": \"{cat}\", \"ph\": \"C\", \"ts\": {ts}, \"pid\": {pid}, \"tid\": {tid}, \"args\": {{\"{name}\": {value}}}}},"
                );
            }
            Payload::Marker { ts, scope } => {
                let _ = writeln!(
                    out,
                    "{{\"name\": \"{name}\", \"cat\": \"{cat}\", \"ph\": \"i\", \"ts\": {ts}, \"pid\": {pid}, \"tid\": {tid}, \"s\": \"{}\"}},",
                    scope.trace_letter()
                );
            }
        }
    }

    /// Appends `records` and leaves a complete, valid JSON file. The first write creates
    /// (truncates) the file.
    pub fn write(&mut self, records: &[Record]) -> std::io::Result<()> {
        let mut body = String::new();
        for r in records {
            self.render(r, &mut body);
        }
        if self.file.is_none() {
            if let Some(dir) = self.path.parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&self.path)?;
            f.write_all(HEADER.as_bytes())?;
            self.tail_pos = HEADER.len() as u64;
            f.write_all(TAIL.as_bytes())?;
            self.file = Some(f);
        }
        if body.is_empty() {
            return Ok(());
        }
        // Drop the final ",\n"; a separator goes before the batch instead if needed.
        body.truncate(body.len() - 2);
        let f = self.file.as_mut().expect("opened above");
        let mut chunk = String::with_capacity(body.len() + TAIL.len() + 2);
        if self.wrote_any {
            chunk.push_str(",\n");
        }
        chunk.push_str(&body);
        let new_tail = self.tail_pos + chunk.len() as u64;
        chunk.push_str(TAIL);
        f.seek(SeekFrom::Start(self.tail_pos))?;
        f.write_all(chunk.as_bytes())?;
        f.set_len(new_tail + TAIL.len() as u64)?;
        f.flush()?;
        self.tail_pos = new_tail;
        self.wrote_any = true;
        Ok(())
    }

    /// True once the file has been created.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::super::buffer::Category;
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(escape_json("a\"b\\c\nd\u{1}é"), "a\\\"b\\\\c\\nd\\u0001é");
    }

    #[test]
    fn pids() {
        assert_eq!(device_pid(Context::cpu(3)), 3);
        assert_eq!(device_pid(Context::gpu(1)), 101);
        assert_eq!(device_name(Context::cpu_pinned(0)), "cpu pinned/0");
        assert_eq!(device_name(Context::cpu_shared(0)), "cpu shared/0");
    }

    #[test]
    fn file_is_valid_after_each_write() {
        let dir = std::env::temp_dir().join(format!("mxrt-trace-unit-{}", std::process::id()));
        let path = dir.join("t.json");
        let mut w = TraceWriter::new(&path);
        w.write(&[]).unwrap();
        let s = std::fs::read_to_string(&path).unwrap();
        assert_eq!(s, format!("{HEADER}{TAIL}"));
        let r = Record {
            name: "op\"1".into(),
            category: Category::Operator,
            device: Some(Context::cpu(0)),
            tid: 7,
            payload: Payload::Duration {
                start: 10,
                end: 20,
                style: Style::Sync,
            },
            aggregate: true,
            arg: None,
        };
        w.write(std::slice::from_ref(&r)).unwrap();
        w.write(&[r]).unwrap();
        let s = std::fs::read_to_string(&path).unwrap();
        assert!(s.ends_with(TAIL));
        assert_eq!(s.matches("\"ph\": \"B\"").count(), 2);
        assert_eq!(s.matches("process_name").count(), 1);
        assert_eq!(s.matches("thread_name").count(), 1);
        assert!(s.contains("\"name\": \"op\\\"1\""));
        assert!(!s.contains(",\n,"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
