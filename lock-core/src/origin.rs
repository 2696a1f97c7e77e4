//! Where a lock request was made: the caller's source location (`#[track_caller]`),
//! the class it was given, and the function that asked. The lock-order checker
//! (`ops/order.rs`) keeps edges between classes, the metrics (`ops/metrics.rs`) label their
//! series with them, and a holder is shown with its site (`who.rs`).

use std::panic::Location;
use std::sync::Arc;

/// Where a lock request was made, and the class it was given.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    /// The caller of the method that made the request (`#[track_caller]`).
    pub(crate) site: &'static Location<'static>,
    /// The class given to the request (`LockRequest::label`, the macro's template).
    pub(crate) label: Option<Arc<str>>,
    /// A name of a `lock_all`, whose order was checked with the whole set: taken in
    /// the set's canonical order, it makes no edge with the names before it.
    pub(crate) in_set: bool,
    /// The function that asked (`LockRequest::function`, the macro's function):
    /// shown as the holder's site instead of the caller's location.
    pub(crate) function: Option<&'static str>,
}

impl Origin {
    /// The caller of the function that calls this (through `#[track_caller]`s).
    #[track_caller]
    pub(crate) fn here() -> Self {
        Self {
            site: Location::caller(),
            label: None,
            in_set: false,
            function: None,
        }
    }

    /// Where the lock was asked for, as a holder shows it: the function, or the
    /// caller's `file:line`.
    pub(crate) fn site_text(&self) -> std::borrow::Cow<'static, str> {
        match self.function {
            Some(function) => function.into(),
            None => format!("{}:{}", self.site.file(), self.site.line()).into(),
        }
    }

    /// What tells this call site from others, for the `who` a client keeps of it
    /// (`who.rs`): the address of its location, and the address and length of its
    /// function's name.
    pub(crate) fn site_key(&self) -> (usize, usize, usize) {
        let (function, len) = self.function.map_or((0, 0), |function| {
            (function.as_ptr() as usize, function.len())
        });
        (std::ptr::from_ref(self.site) as usize, function, len)
    }

    /// The class of a lock named `name` asked for from here.
    pub(crate) fn class(&self, name: &[u8]) -> Arc<str> {
        match &self.label {
            Some(label) => label.clone(),
            None => fold(name).into(),
        }
    }
}

/// `name` with every run of ASCII digits folded into `{#}` (bytes that are not
/// UTF-8 shown as U+FFFD).
pub(crate) fn fold(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("{#}");
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_fold_into_one_class() {
        assert_eq!(fold(b"order:42"), "order:{#}");
        assert_eq!(fold(b"order:7:line:12"), "order:{#}:line:{#}");
        assert_eq!(fold(b"inventory:bread"), "inventory:bread");
    }
}
