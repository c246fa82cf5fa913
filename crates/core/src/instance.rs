//! Service instances as the registry records them.

use std::fmt;

use serde_json::{Map, Value};

use crate::{
    AppName, Error, InstanceName, Result, ServiceType,
    ports::{queue::QueueConfig, search::SearchConfig},
};

/// The registry's identifier of an instance. Never reused, so contents left behind by an
/// interrupted destroy can never be seen by a later instance of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub i64);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A service instance: who owns it, what it is called, and how it is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The registry's identifier, unique across all applications and types.
    pub id: InstanceId,
    /// The owning application (the built-in [`AppName::domain`] for the domain URL form).
    pub app: AppName,
    /// The instance's name within its application and type.
    pub name: InstanceName,
    /// Type-specific configuration given at creation.
    pub config: InstanceConfig,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

impl Instance {
    /// The service type of this instance.
    pub fn kind(&self) -> ServiceType {
        self.config.kind()
    }

    /// The instance's URL path in the address form of its application.
    pub fn path(&self) -> String {
        path(&self.app, self.kind(), self.name.as_str())
    }

    /// An instance as a registry stored it: its columns, `config` parsed as JSON.
    pub fn from_stored(
        id: i64,
        app: &str,
        kind: &str,
        name: &str,
        config: &Value,
        created_ms: i64,
    ) -> Result<Self> {
        let kind: ServiceType = kind.parse()?;
        Ok(Self {
            id: InstanceId(id),
            app: AppName::from_stored(app)?,
            name: name.parse()?,
            config: InstanceConfig::from_stored(kind, config)?,
            created_ms,
        })
    }
}

/// The URL path of instance `name` of type `kind` in application `app`: the domain form
/// `/<type>/<name>` for the built-in domain application, else `/<app>/<type>/<name>`.
/// For messages that tell a client which request to make.
pub fn path(app: &AppName, kind: ServiceType, name: &str) -> String {
    if app.is_domain() {
        format!("/{kind}/{name}")
    } else {
        format!("/{app}/{kind}/{name}")
    }
}

/// The configuration given when an instance is created; its variant is the service type.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceConfig {
    /// A document store; it takes no configuration.
    Data,
    /// A key/value cache; it takes no configuration.
    Cache,
    /// A full-text index: which fields are searched and which are returned.
    Search(SearchConfig),
    /// A job queue: where jobs are delivered and how.
    Queue(QueueConfig),
    /// An object store; it takes no configuration.
    Storage,
}

impl InstanceConfig {
    /// The service type this configuration belongs to.
    pub fn kind(&self) -> ServiceType {
        match self {
            Self::Data => ServiceType::Data,
            Self::Cache => ServiceType::Cache,
            Self::Search(_) => ServiceType::Search,
            Self::Queue(_) => ServiceType::Queue,
            Self::Storage => ServiceType::Storage,
        }
    }

    /// Validate the body of a create request for an instance of type `kind`.
    ///
    /// Data, cache and storage take no configuration: any body (or none) is accepted and
    /// ignored, as clients commonly send `{}`. Search and queue require an object.
    pub fn from_request(kind: ServiceType, body: Option<&Value>) -> Result<Self> {
        let object = |body: Option<&Value>| -> Result<Map<String, Value>> {
            match body {
                Some(Value::Object(m)) => Ok(m.clone()),
                Some(_) => Err(Error::invalid(format!(
                    "the body to create a {kind} instance must be a JSON object"
                ))),
                // An absent body is an empty configuration: the type's own check then names
                // the field that is missing.
                None => Ok(Map::new()),
            }
        };
        Ok(match kind {
            ServiceType::Data => Self::Data,
            ServiceType::Cache => Self::Cache,
            ServiceType::Storage => Self::Storage,
            ServiceType::Search => Self::Search(SearchConfig::from_json(&object(body)?)?),
            ServiceType::Queue => Self::Queue(QueueConfig::from_json(&object(body)?)?),
        })
    }

    /// The configuration as stored by registries (and as validated by
    /// [`InstanceConfig::from_stored`]). Secrets are included; see
    /// [`InstanceConfig::to_public_json`] for display.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Data | Self::Cache | Self::Storage => Value::Object(Map::new()),
            Self::Search(c) => c.to_json(),
            Self::Queue(c) => c.to_json(),
        }
    }

    /// The configuration for display: like [`InstanceConfig::to_json`] with secrets redacted.
    pub fn to_public_json(&self) -> Value {
        match self {
            Self::Queue(c) => c.to_public_json(),
            other => other.to_json(),
        }
    }

    /// Rebuild a configuration a registry stored with [`InstanceConfig::to_json`].
    pub fn from_stored(kind: ServiceType, json: &Value) -> Result<Self> {
        let stored = Some(json);
        Self::from_request(kind, stored)
            .map_err(|e| Error::internal(format!("stored {kind} configuration is unreadable: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_follow_the_address_form() {
        let shop: AppName = "shop".parse().unwrap();
        assert_eq!(path(&AppName::domain(), ServiceType::Data, "m"), "/data/m");
        assert_eq!(path(&shop, ServiceType::Cache, "c"), "/shop/cache/c");
    }

    #[test]
    fn plain_types_ignore_their_body() {
        for kind in [ServiceType::Data, ServiceType::Cache, ServiceType::Storage] {
            assert_eq!(
                InstanceConfig::from_request(kind, None).map(|c| c.kind()),
                Ok(kind)
            );
            assert!(InstanceConfig::from_request(kind, Some(&json!({"x": 1}))).is_ok());
        }
    }

    #[test]
    fn configs_round_trip_through_storage() {
        let cases = [
            (
                ServiceType::Search,
                json!({"fields": ["title"], "storeFields": ["title", "year"]}),
            ),
            (
                ServiceType::Queue,
                json!({"target": "https://example.com/hook", "secret": "s3cret"}),
            ),
            (ServiceType::Data, json!({})),
        ];
        for (kind, body) in cases {
            let config = InstanceConfig::from_request(kind, Some(&body)).unwrap();
            let stored = config.to_json();
            assert_eq!(InstanceConfig::from_stored(kind, &stored).unwrap(), config);
        }
    }

    #[test]
    fn search_and_queue_need_an_object() {
        for kind in [ServiceType::Search, ServiceType::Queue] {
            let missing = InstanceConfig::from_request(kind, None).unwrap_err();
            assert!(matches!(missing, Error::Invalid(_)));
            let array = InstanceConfig::from_request(kind, Some(&json!([1]))).unwrap_err();
            assert!(matches!(array, Error::Invalid(_)));
        }
    }
}
