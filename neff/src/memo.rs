//! Parsed JSON members kept with their NEFF: a model loaded many times from one parsed NEFF
//! (a fault campaign loads it for every experiment) reads each kelf, def.json, engine JSON
//! and tensor map once instead of at every load, where their parsing was ~4% of a
//! campaign's CPU (`docs/performance.md`, nineteenth session). A NEFF's members never
//! change once parsed, so a kept value stays true for its life.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::NeffError;

type Key = (String, TypeId);

/// Member values parsed so far, by member path and type.
#[derive(Default)]
pub(crate) struct Memo {
    kept: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
}

impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo {
            kept: Mutex::new(self.lock().clone()),
        }
    }
}

impl Memo {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<dyn Any + Send + Sync>>> {
        // Nothing panics under the lock: a poisoned map is still consistent.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `T` parsed from member `path`: kept from an earlier call, else `parse`d now and
    /// kept (a failure is not kept: it is returned again by the next call's parse). Two
    /// threads asking at once may both parse; either's value is kept, and they are equal.
    pub(crate) fn get<T: Any + Send + Sync>(
        &self,
        path: &str,
        parse: impl FnOnce() -> Result<T, NeffError>,
    ) -> Result<Arc<T>, NeffError> {
        let key = (path.to_owned(), TypeId::of::<T>());
        if let Some(v) = self.lock().get(&key).cloned() {
            if let Ok(t) = v.downcast::<T>() {
                return Ok(t);
            }
        }
        let parsed = Arc::new(parse()?);
        let kept = self
            .lock()
            .entry(key)
            .or_insert_with(|| parsed.clone())
            .clone();
        // The key holds `T`'s type id, so what is kept under it is a `T`.
        Ok(kept.downcast::<T>().unwrap_or(parsed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_parsed_once_per_path_and_type_and_failures_are_not_kept() {
        let m = Memo::default();
        let mut calls = 0;
        let a = m.get("x.json", || {
            calls += 1;
            Ok(5u32)
        });
        let b = m.get("x.json", || {
            calls += 1;
            Ok(6u32)
        });
        assert_eq!((*a.expect("kept"), *b.expect("kept"), calls), (5, 5, 1));
        // Another type of the same member, another member: parsed on their own.
        assert_eq!(*m.get("x.json", || Ok(7u64)).expect("kept"), 7);
        assert_eq!(*m.get("y.json", || Ok(8u32)).expect("kept"), 8);
        let err = || {
            Err::<u32, _>(NeffError::MissingMember {
                path: "z.json".into(),
                referenced_by: "the test".into(),
            })
        };
        assert!(m.get("z.json", err).is_err());
        assert_eq!(
            *m.get("z.json", || Ok(9u32)).expect("kept"),
            9,
            "failure not kept"
        );
        let c = m.clone();
        assert_eq!(
            *c.get("x.json", || Ok(0u32)).expect("kept"),
            5,
            "a clone keeps them"
        );
    }
}
