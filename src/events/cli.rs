//! Events of the command line: a usage error, a setting keepwrap cannot
//! read.

const TARGET: &str = "keepwrap::cli";

/// A keepwrap setting (`option`, from `variable` when a variable set it)
/// has a value keepwrap cannot read: `what` says it as a usage error would,
/// `then` what the launch does instead.
pub fn setting_invalid(what: &str, option: &str, variable: Option<&str>, value: &str, then: &str) {
    tracing::error!(
        target: TARGET,
        event = "setting_invalid",
        option,
        variable,
        value,
        "{what}; {then} (--strict, or KEEPWRAP_STRICT=1, refuses it)"
    );
}

/// The command line cannot be used: `what` says why (exit status 2).
pub fn usage_error(what: &str) {
    tracing::error!(
        target: TARGET,
        event = "usage_error",
        "{what}"
    );
}
