//! The bare-HTTP ceiling: `GET /_health`, the cheapest route the server has. Every other
//! scenario is reported as a fraction of it at the same concurrency.

use async_trait::async_trait;

use super::{Ctx, Measurement, Scenario, Target};

/// The ceiling at 32 connections, reported as its own row.
pub struct Ceiling;

#[async_trait]
impl Scenario for Ceiling {
    fn name(&self) -> String {
        "http: ceiling GET /_health (32 conn)".to_owned()
    }

    fn service(&self) -> &'static str {
        "http"
    }

    fn target(&self) -> Target {
        Target::None
    }

    async fn run(&self, ctx: &Ctx) -> anyhow::Result<Measurement> {
        let c = ctx.ceiling(32).await?;
        let mut m = Measurement::from_load(32, &c, Some(&c));
        m.ratio = Some(1.0);
        Ok(m)
    }
}
