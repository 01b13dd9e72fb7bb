//! The one way the library reports what it does not return as an error: a connection it refused,
//! a shared buffer it could not map and replaced with private memory. By default each report is
//! one line on stderr, `psyne: ...`; a program (or a launcher, a Python binding) may route them
//! elsewhere with [`set_reporter`].

use std::sync::{Arc, RwLock};

/// How much a report matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something went wrong and psyne worked around it, or refused a stranger.
    Warn,
    /// Progress worth knowing about.
    Info,
}

/// Receives every report.
pub type Reporter = Arc<dyn Fn(Level, &str) + Send + Sync>;

static REPORTER: RwLock<Option<Reporter>> = RwLock::new(None);

/// Routes every later report to `reporter` instead of stderr.
pub fn set_reporter(reporter: impl Fn(Level, &str) + Send + Sync + 'static) {
    let mut slot = REPORTER.write().unwrap_or_else(|p| p.into_inner());
    *slot = Some(Arc::new(reporter));
}

/// Reports `message` at `level`.
pub(crate) fn report(level: Level, message: &str) {
    let reporter = REPORTER.read().unwrap_or_else(|p| p.into_inner()).clone();
    match reporter {
        Some(r) => r(level, message),
        None => eprintln!("psyne: {message}"),
    }
}

/// Reports a warning.
pub(crate) fn warn(message: impl std::fmt::Display) {
    report(Level::Warn, &message.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_reporter_receives_what_the_library_reports() {
        static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
        set_reporter(|level, text| {
            SEEN.lock().unwrap().push(format!("{level:?} {text}"));
        });
        warn(format_args!("rank {}: refused", 3));
        assert!(SEEN
            .lock()
            .unwrap()
            .contains(&"Warn rank 3: refused".to_string()));
    }
}
