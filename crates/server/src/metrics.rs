//! Request counters and a latency histogram, served as Prometheus text at `/_metrics`.

use std::{
    fmt::Write,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Counters updated once per request; lock-free.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Responses by status class: index 1 = 1xx … 5 = 5xx.
    by_class: [AtomicU64; 6],
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Metrics {
    /// Record one answered request.
    pub fn record(&self, status: u16, elapsed: Duration) {
        let class = usize::from(status / 100).min(5);
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The counters in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        out.push_str(
            "# HELP quintet_http_requests_total HTTP requests answered, by status class.\n",
        );
        out.push_str("# TYPE quintet_http_requests_total counter\n");
        for (class, n) in self.by_class.iter().enumerate().skip(1) {
            let _ = writeln!(
                out,
                "quintet_http_requests_total{{class=\"{class}xx\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP quintet_http_request_duration_seconds Time to answer HTTP requests.\n",
        );
        out.push_str("# TYPE quintet_http_request_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "quintet_http_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "quintet_http_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "quintet_http_request_duration_seconds_sum {sum}");
        let _ = writeln!(out, "quintet_http_request_duration_seconds_count {count}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.record(200, Duration::from_micros(300));
        m.record(404, Duration::from_millis(3));
        m.record(500, Duration::from_secs(10));
        let text = m.render();
        assert!(text.contains("quintet_http_requests_total{class=\"2xx\"} 1"));
        assert!(text.contains("quintet_http_requests_total{class=\"4xx\"} 1"));
        assert!(text.contains("quintet_http_requests_total{class=\"5xx\"} 1"));
        assert!(text.contains("quintet_http_request_duration_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("quintet_http_request_duration_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("quintet_http_request_duration_seconds_bucket{le=\"+Inf\"} 3"));
    }
}
