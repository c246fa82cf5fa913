//! What `/_metrics` serves: counters and histograms kept by `prometheus-client` while the
//! server runs, plus gauges measured when a scrape asks (see [`crate::routes`]' meta
//! module), encoded as OpenMetrics text.
//!
//! Requests are counted per route (the router's path pattern, not the request's path, so
//! the label set stays as small as the route table) and method; the service is the first
//! segment of the route. Long-lived families are shared with each scrape's registry by
//! cloning (they are reference-counted), so a scrape never copies a counter.
//!
//! Labels naming an instance (a queue, a search index) are bounded: the first
//! [`MAX_LABELLED`] get a label of their own, the rest are counted together under
//! [`OTHER`], so a node with thousands of instances still answers a scrape of bounded size.

use std::{
    collections::{HashMap, HashSet},
    sync::{Mutex, PoisonError, RwLock, atomic::AtomicU64},
    time::Duration,
};

use axum::{
    extract::{MatchedPath, Request},
    middleware::Next,
    response::Response,
};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Most instances of one kind that get a label value of their own in a family.
pub const MAX_LABELLED: usize = 100;

/// The label value that counts the instances beyond [`MAX_LABELLED`] together.
pub const OTHER: &str = "_other";

/// The route that answered a request, put in the response's extensions by [`mark_route`]
/// for [`crate::middleware::observe`], which runs outside the router.
#[derive(Debug, Clone, Copy)]
pub struct Route(pub &'static str);

/// What the router answers on its own (no route matched).
const UNMATCHED: &str = "unmatched";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    service: &'static str,
    method: &'static str,
    route: &'static str,
    class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    service: &'static str,
    method: &'static str,
    route: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    queue: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    result: &'static str,
}

/// How a queue delivery ended, for [`Metrics::delivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The worker answered 2xx.
    Delivered,
    /// The job went to ERROR.
    Failed,
    /// The worker could not be reached; the job is tried again later.
    Retry,
}

impl DeliveryOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::Retry => "retry",
        }
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The long-lived metrics of one server; cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily<LatencyLabels>,
    deliveries: Family<DeliveryLabels, Counter>,
    /// The queues with a label of their own in `deliveries` (at most [`MAX_LABELLED`]).
    delivery_queues: Mutex<HashSet<String>>,
    cache_lookups: Family<LookupLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            deliveries: Family::default(),
            delivery_queues: Mutex::default(),
            cache_lookups: Family::default(),
        }
    }
}

impl Metrics {
    /// Record one answered request: `route` is the router's pattern (`None` when no route
    /// matched).
    pub fn record(
        &self,
        method: &axum::http::Method,
        route: Option<Route>,
        status: u16,
        elapsed: Duration,
    ) {
        let route = route.map_or(UNMATCHED, |r| r.0);
        let service = service_of(route);
        let method = method_label(method);
        self.requests
            .get_or_create(&RequestLabels {
                service,
                method,
                route,
                class: class_of(status),
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels {
                service,
                method,
                route,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Record how one delivery of a job of `queue` (`app/name`) ended. The first
    /// [`MAX_LABELLED`] queues to deliver are counted under their own name, later ones
    /// under [`OTHER`].
    pub fn delivery(&self, queue: &str, outcome: DeliveryOutcome) {
        let queue = {
            let mut seen = self
                .delivery_queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if seen.contains(queue) {
                queue.to_owned()
            } else if seen.len() < MAX_LABELLED {
                seen.insert(queue.to_owned());
                queue.to_owned()
            } else {
                OTHER.to_owned()
            }
        };
        self.deliveries
            .get_or_create(&DeliveryLabels {
                queue,
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Record a cache read that found its key (`hit`) or did not.
    pub fn cache_lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.cache_lookups
            .get_or_create(&LookupLabels { result })
            .inc();
    }

    /// The share of cache reads that found their key since the server started; `None`
    /// before the first read.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let count = |result| {
            self.cache_lookups
                .get_or_create(&LookupLabels { result })
                .get()
        };
        let (hits, misses) = (count("hit"), count("miss"));
        let total = hits + misses;
        // Counts stay far below 2^52, where the conversion is exact.
        (total > 0).then(|| hits as f64 / total as f64)
    }

    /// Register the long-lived families into `registry` (prefixed `quintet_`), for one
    /// scrape.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "http_requests",
            "HTTP requests answered, by service, method, route and status class",
            self.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time to answer HTTP requests, by service, method and route",
            self.latency.clone(),
        );
        registry.register(
            "queue_deliveries",
            "Queue job deliveries by queue and outcome (delivered, failed, retry)",
            self.deliveries.clone(),
        );
        registry.register(
            "cache_lookups",
            "Cache reads by result (hit or miss)",
            self.cache_lookups.clone(),
        );
        if let Some(ratio) = self.cache_hit_ratio() {
            let g = Gauge::<f64, AtomicU64>::default();
            g.set(ratio);
            registry.register(
                "cache_hit_ratio",
                "Share of cache reads that found their key since the server started",
                g,
            );
        }
    }
}

/// Router layer: note the route pattern that matched in the response, for the metrics.
pub async fn mark_route(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| intern(p.as_str()));
    let mut res = next.run(req).await;
    if let Some(route) = route {
        res.extensions_mut().insert(Route(route));
    }
    res
}

/// The route patterns seen so far, leaked once each: they come from the route table, so
/// there are as many as routes, and labels can then be `&'static str` (no allocation per
/// request).
fn intern(pattern: &str) -> &'static str {
    static SEEN: RwLock<Option<HashMap<Box<str>, &'static str>>> = RwLock::new(None);
    if let Some(found) = SEEN
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(pattern).copied())
    {
        return found;
    }
    let mut seen = SEEN.write().unwrap_or_else(PoisonError::into_inner);
    let map = seen.get_or_insert_with(HashMap::new);
    if let Some(found) = map.get(pattern) {
        return found;
    }
    let leaked: &'static str = Box::leak(pattern.to_owned().into_boxed_str());
    map.insert(pattern.into(), leaked);
    leaked
}

/// The service a route belongs to: its first segment, with the server's own routes
/// grouped.
fn service_of(route: &str) -> &'static str {
    let first = route
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("");
    match first {
        "data" => "data",
        "cache" => "cache",
        "search" => "search",
        "queue" => "queue",
        "storage" | "_presigned" => "storage",
        "_admin" => "admin",
        _ if route == UNMATCHED => "none",
        _ => "server",
    }
}

fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

fn class_of(status: u16) -> &'static str {
    match status / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn render(m: &Metrics) -> String {
        let mut registry = Registry::with_prefix("quintet");
        m.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn requests_by_route_class_and_latency_buckets() {
        let m = Metrics::default();
        let get = Some(Route("/data/{name}/{id}"));
        m.record(&Method::GET, get, 200, Duration::from_micros(300));
        m.record(&Method::GET, get, 404, Duration::from_millis(3));
        m.record(&Method::GET, None, 404, Duration::from_millis(3));
        m.record(
            &Method::POST,
            Some(Route("/_admin/accounts")),
            500,
            Duration::from_secs(9),
        );
        let text = render(&m);
        for line in [
            r#"quintet_http_requests_total{service="data",method="GET",route="/data/{name}/{id}",class="2xx"} 1"#,
            r#"quintet_http_requests_total{service="data",method="GET",route="/data/{name}/{id}",class="4xx"} 1"#,
            r#"quintet_http_requests_total{service="none",method="GET",route="unmatched",class="4xx"} 1"#,
            r#"quintet_http_requests_total{service="admin",method="POST",route="/_admin/accounts",class="5xx"} 1"#,
            r#"quintet_http_request_duration_seconds_bucket{le="0.0005",service="data",method="GET",route="/data/{name}/{id}"} 1"#,
            r#"quintet_http_request_duration_seconds_bucket{le="0.005",service="data",method="GET",route="/data/{name}/{id}"} 2"#,
            r#"quintet_http_request_duration_seconds_count{service="admin",method="POST",route="/_admin/accounts"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn deliveries_and_cache_lookups() {
        let m = Metrics::default();
        m.delivery("shop/mail", DeliveryOutcome::Delivered);
        m.delivery("shop/mail", DeliveryOutcome::Delivered);
        m.delivery("shop/mail", DeliveryOutcome::Retry);
        m.cache_lookup(true);
        m.cache_lookup(false);
        m.cache_lookup(false);
        let text = render(&m);
        for line in [
            r#"quintet_queue_deliveries_total{queue="shop/mail",outcome="delivered"} 2"#,
            r#"quintet_queue_deliveries_total{queue="shop/mail",outcome="retry"} 1"#,
            r#"quintet_cache_lookups_total{result="hit"} 1"#,
            r#"quintet_cache_lookups_total{result="miss"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn hit_ratio_appears_with_the_first_read() {
        let m = Metrics::default();
        assert!(!render(&m).contains("quintet_cache_hit_ratio"));
        m.cache_lookup(true);
        m.cache_lookup(true);
        m.cache_lookup(true);
        m.cache_lookup(false);
        let text = render(&m);
        assert!(
            text.lines().any(|l| l == "quintet_cache_hit_ratio 0.75"),
            "{text}"
        );
    }

    #[test]
    fn queues_beyond_the_bound_share_one_label() {
        let m = Metrics::default();
        for n in 0..MAX_LABELLED + 5 {
            m.delivery(&format!("a/q{n}"), DeliveryOutcome::Delivered);
        }
        m.delivery("a/q0", DeliveryOutcome::Delivered);
        let text = render(&m);
        for line in [
            r#"quintet_queue_deliveries_total{queue="a/q0",outcome="delivered"} 2"#,
            r#"quintet_queue_deliveries_total{queue="_other",outcome="delivered"} 5"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line} in
{text}"
            );
        }
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("quintet_queue_deliveries_total{"))
            .count();
        assert_eq!(labelled, MAX_LABELLED + 1);
    }

    #[test]
    fn services_of_routes() {
        for (route, service) in [
            ("/data/{name}", "data"),
            ("/cache/{instance}/{key}", "cache"),
            ("/_presigned/{*rest}", "storage"),
            ("/_admin/apps", "admin"),
            ("/_health", "server"),
            ("unmatched", "none"),
        ] {
            assert_eq!(service_of(route), service, "{route}");
        }
    }

    #[test]
    fn interned_routes_are_shared() {
        let a = intern("/x/{y}");
        let b = intern(&String::from("/x/{y}"));
        assert!(std::ptr::eq(a, b));
    }
}
