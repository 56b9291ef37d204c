//! Closed vocabularies: a kind of word that status, Kubernetes Events, logs or metrics carry (a condition type, a
//! reason, a phase, a metric label) is an enum declared once, with its one list and the names it is written as.
//! Metrics start every label from that list, and `tests/vocabulary.rs` checks the status reference's tables
//! (docs/api.md) against it, so a new word cannot be missed by either.

/// Declares an enum whose variants are the only words of their kind, with:
/// - `ALL`: every word, in declaration order;
/// - `as_str`: the word as written (the variant's name, or the literal after `=`);
/// - `from_name`: the word read back (`None` for anything else);
/// - `Display` as `as_str`.
///
/// Attributes (derives, doc comments, serde) pass through to the enum and its variants.
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident $(= $written:literal)? ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),*
        }

        impl $name {
            /// Every word of this kind, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The word as written in status, Events, logs and metrics.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $crate::words::words!(@written $variant $($written)?) ),*
                }
            }

            /// The word written as `name` (read back from status).
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|w| w.as_str() == name)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@written $variant:ident $written:literal) => { $written };
    (@written $variant:ident) => { stringify!($variant) };
}

pub(crate) use words;

words! {
    /// What kind of failure a reconcile met: the `category` label of `worksession_agent_reconcile_errors_total` and
    /// of the `reconcile.failed` log line (never an object's name).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ErrorCategory {
        /// The API server answered with an error.
        ApiRefused = "api_refused",
        /// The API server could not be reached.
        ApiUnreachable = "api_unreachable",
        /// Local mode's directory could not be read or written.
        LocalStore = "local_store",
        /// tmux could not be run.
        TmuxExec = "tmux_exec",
        /// tmux did not answer in time.
        TmuxTimeout = "tmux_timeout",
        /// tmux refused a command.
        TmuxFailed = "tmux_failed",
        /// A session's working directory is not a directory on the node.
        Workdir = "workdir",
        /// A session's room could not be freed.
        Room = "room",
        /// A permission request's answer could not be written where its hook waits.
        Answer = "answer",
    }
}

#[cfg(test)]
mod tests {
    words! {
        /// A test vocabulary.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Colour {
            /// Named by its variant.
            Red,
            /// Named by its literal.
            DeepBlue = "deep_blue",
        }
    }

    #[test]
    fn a_word_is_written_and_read_back_by_one_list() {
        assert_eq!(Colour::ALL, &[Colour::Red, Colour::DeepBlue]);
        assert_eq!((Colour::Red.as_str(), Colour::DeepBlue.to_string()), ("Red", "deep_blue".to_string()));
        assert_eq!(Colour::from_name("deep_blue"), Some(Colour::DeepBlue));
        assert_eq!((Colour::from_name("DeepBlue"), Colour::from_name("red")), (None, None));
    }
}
