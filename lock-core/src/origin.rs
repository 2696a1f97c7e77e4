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
        self.label.clone().unwrap_or_else(|| fold(name).into())
    }
}

/// `name` with every part that varies folded into `{#}`: each word (a run of ASCII
/// letters and digits) that holds a digit (`42`, `5e3b`, `v2`) or is eight hex
/// digits or more (`deadbeef`), and a run of such words joined by `-` or `_` (a
/// UUID, a date; a hex word joined to one, like a UUID's `abcd`, too) as one. `order:42` and `order:7` are both `order:{#}`;
/// `job:123e4567-e89b-12d3-a456-426614174000` is `job:{#}`. Bytes that are not
/// UTF-8 are shown as U+FFFD.
pub(crate) fn fold(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::with_capacity(text.len());
    // A `-` or `_` after a folded word, kept back until the next word says whether
    // it joins two folded words.
    let mut joiner: Option<char> = None;
    let mut last_folded = false;
    let mut rest = text.as_ref();
    while let Some(c) = rest.chars().next() {
        let word_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        if word_len == 0 {
            if let Some(joined) = joiner.take() {
                out.push(joined);
            }
            if last_folded && (c == '-' || c == '_') {
                joiner = Some(c);
            } else {
                out.push(c);
                last_folded = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let word = &rest[..word_len];
        let hex = word.bytes().all(|b| b.is_ascii_hexdigit());
        // In a run joined to a folded word, any hex word varies (a UUID's `abcd`).
        let varies = word.bytes().any(|b| b.is_ascii_digit())
            || (hex && (word.len() >= 8 || joiner.is_some()));
        match (varies, joiner.take()) {
            // Joined to the folded word before it: one `{#}` for both.
            (true, Some(_)) => {}
            (true, None) => out.push_str("{#}"),
            (false, joined) => {
                out.extend(joined);
                out.push_str(word);
            }
        }
        last_folded = varies;
        rest = &rest[word_len..];
    }
    out.extend(joiner);
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

    /// Issue 37 (2): hex and UUID-like parts fold too, into one `{#}` each.
    #[test]
    fn hex_and_uuids_fold_into_one_class() {
        assert_eq!(fold(b"job:123e4567-e89b-12d3-a456-426614174000"), "job:{#}");
        assert_eq!(
            fold(b"job:ABCDEF01-abcd-ef01-0000-0123456789ab:step"),
            "job:{#}:step"
        );
        assert_eq!(fold(b"blob:deadbeefcafe"), "blob:{#}");
        assert_eq!(fold(b"import:2026-12-01"), "import:{#}");
        assert_eq!(fold(b"sku-12a_x"), "sku-{#}_x");
        // Words without digits stay, `-` between them too.
        assert_eq!(fold(b"cart:add-item"), "cart:add-item");
        assert_eq!(fold(b"user:cafe"), "user:cafe");
        assert_eq!(fold(b"a-7-"), "a-{#}-");
        assert_eq!(fold("ключ:7".as_bytes()), "ключ:{#}");
    }
}
