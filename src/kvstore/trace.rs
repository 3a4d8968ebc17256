//! Profiler records for KVStore calls: one "KVStore<Op>" duration per call (category "KVStore",
//! the keys as its argument), taken only while the profiler records ops.

use super::keys::Keys;
use crate::profiler;

/// Records the call from creation to drop.
pub(crate) struct Traced<'a> {
    op: &'static str,
    keys: &'a Keys<'a>,
    start: Option<u64>,
}

impl<'a> Traced<'a> {
    pub(crate) fn begin(op: &'static str, keys: &'a Keys<'a>) -> Self {
        let start = profiler::kvstore_enabled().then(profiler::now_us);
        Traced { op, keys, start }
    }
}

impl Drop for Traced<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let n = match self.keys {
                Keys::Int(k) => k.len(),
                Keys::Str(k) => k.len(),
            };
            let mut shown: Vec<String> = (0..n.min(8)).map(|i| self.keys.display(i)).collect();
            if n > 8 {
                shown.push(format!("... ({n} keys)"));
            }
            profiler::record_kvstore(self.op, &shown.join(","), start, profiler::now_us());
        }
    }
}
