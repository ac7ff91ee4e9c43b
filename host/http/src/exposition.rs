//! The two formats `/metrics` answers in (docs/src/operations.md,
//! Metrics): OpenMetrics 1.0 for a scraper that asks for it first (what
//! Prometheus asks by default), Prometheus' text format 0.0.4 for every
//! other (`promtool check metrics`, curl, older scrapers). The encoder
//! writes OpenMetrics, where a counter's family is named without its
//! `_total` and its samples with it; the text format names both alike, so
//! a 0.0.4 reader would find counters without help text.

/// The text format's content type.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics' content type.
pub const OPEN_METRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether a request's `Accept` header asks for OpenMetrics at least as
/// much as for the text format (no header, or `*/*` alone: the text
/// format).
pub fn wants_open_metrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let (mut open_metrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let quality = parts
            .filter_map(|param| param.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => open_metrics = open_metrics.max(quality),
            "text/plain" | "text/*" => text = text.max(quality),
            _ => {}
        }
    }
    open_metrics > 0.0 && open_metrics >= text
}

/// The text format of an OpenMetrics page: each counter's `# HELP` and
/// `# TYPE` name its samples (`_total`), and the end marker goes.
pub fn text_format(open_metrics: &str) -> String {
    let lines: Vec<&str> = open_metrics.lines().collect();
    let mut out = String::with_capacity(open_metrics.len() + 1_024);
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        at += 1;
        if line == "# EOF" {
            continue;
        }
        let counter = line.strip_prefix("# HELP ").and_then(|help| {
            let name = lines
                .get(at)?
                .strip_prefix("# TYPE ")?
                .strip_suffix(" counter")?;
            let text = help.strip_prefix(name)?;
            Some((name, text))
        });
        match counter {
            Some((name, text)) => {
                out.push_str(&format!(
                    "# HELP {name}_total{text}\n# TYPE {name}_total counter\n"
                ));
                at += 1;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_for_a_scraper_that_asks_for_it_first() {
        // Prometheus' default scrape protocols.
        let prometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert!(wants_open_metrics(Some(prometheus)));
        assert!(wants_open_metrics(Some("application/openmetrics-text")));
        assert!(!wants_open_metrics(None));
        assert!(!wants_open_metrics(Some("*/*")));
        assert!(!wants_open_metrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_open_metrics(Some(
            "text/plain;q=0.9, application/openmetrics-text;q=0.5"
        )));
        assert!(!wants_open_metrics(Some(
            "application/openmetrics-text;q=0"
        )));
    }

    #[test]
    fn counters_are_named_by_their_samples_and_the_end_marker_goes() {
        let open_metrics = "# HELP chainsieve_events Events seen.\n# TYPE chainsieve_events counter\nchainsieve_events_total{chain=\"eth\"} 3\n# HELP chainsieve_live 1 when live.\n# TYPE chainsieve_live gauge\nchainsieve_live 1\n# EOF\n";
        assert_eq!(
            text_format(open_metrics),
            "# HELP chainsieve_events_total Events seen.\n# TYPE chainsieve_events_total counter\nchainsieve_events_total{chain=\"eth\"} 3\n# HELP chainsieve_live 1 when live.\n# TYPE chainsieve_live gauge\nchainsieve_live 1\n"
        );
    }
}
