//! Restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`): Triton's categories of
//! endpoints, each of which can be made to require a header with a given value. A request to a restricted
//! category without it is refused before it reaches the service: 403 over HTTP, UNAVAILABLE over gRPC
//! (whose header names take Triton's `triton-grpc-protocol-` prefix), with Triton's messages.
//!
//! The flag's value is `<category>[,<category>…]:<header>=<value>`; a category may be restricted once.

use axum::http::HeaderMap;

/// Triton's categories, by the names the flags use.
const CATEGORIES: [&str; 9] = [
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

/// The header each restricted category requires, and its value.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    rules: [Option<(String, String)>; 9],
}

/// The header gRPC restrictions name is prefixed with this (as Triton's are).
pub const GRPC_HEADER_PREFIX: &str = "triton-grpc-protocol-";

impl Restrictions {
    /// Reads the flags' values; `header_prefix` is put before each header name, `what` ("api" or
    /// "protocol") names the categories in messages, as tritonserver's do.
    pub fn parse(values: &[String], header_prefix: &str, what: &str) -> Result<Self, String> {
        let mut restrictions = Restrictions::default();
        for value in values {
            let (categories, rule) = value
                .split_once(':')
                .ok_or_else(|| format!("'{value}': expected <{what}>[,<{what}>...]:<header>=<value>"))?;
            let (header, expected) = rule
                .split_once('=')
                .ok_or_else(|| format!("'{value}': expected <{what}>[,<{what}>...]:<header>=<value>"))?;
            if header.is_empty() {
                return Err(format!("'{value}': the header name is empty"));
            }
            for name in categories.split(',') {
                let index = CATEGORIES
                    .iter()
                    .position(|category| *category == name)
                    .ok_or_else(|| format!("unknown restricted {what} '{name}'"))?;
                if restrictions.rules[index].is_some() {
                    return Err(format!("restricted {what} '{name}' can not be specified in multiple config groups"));
                }
                let header = format!("{header_prefix}{header}").to_ascii_lowercase();
                restrictions.rules[index] = Some((header, expected.to_string()));
            }
        }
        Ok(restrictions)
    }

    pub fn is_empty(&self) -> bool {
        self.rules.iter().all(Option::is_none)
    }

    /// Ok when `category` is open or `headers` carry its header with its value; else the header it needs.
    pub fn check(&self, category: Category, headers: &HeaderMap) -> Result<(), &str> {
        match &self.rules[category as usize] {
            Some((header, expected)) if headers.get(header.as_str()).is_none_or(|value| value != expected.as_str()) => {
                Err(header)
            }
            _ => Ok(()),
        }
    }
}

/// The category of an HTTP route, from its path (`None`: not a Triton endpoint, left to answer 404).
pub fn http_category(path: &str) -> Option<Category> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    Some(match segments.as_slice() {
        ["v2"] => Category::Metadata,
        ["v2", "health", ..] => Category::Health,
        ["v2", "logging"] => Category::Logging,
        ["v2", "trace", ..] => Category::Trace,
        ["v2", "repository", ..] => Category::ModelRepository,
        ["v2", "systemsharedmemory" | "cudasharedmemory", ..] => Category::SharedMemory,
        ["v2", "models", "stats"] => Category::Statistics,
        ["v2", "models", _model, rest @ ..] => {
            let rest = match rest {
                ["versions", _version, rest @ ..] => rest,
                rest => rest,
            };
            match rest {
                [] => Category::Metadata,
                ["ready"] => Category::Health,
                ["config"] => Category::ModelConfig,
                ["stats"] => Category::Statistics,
                ["trace", "setting"] => Category::Trace,
                ["infer" | "generate" | "generate_stream"] => Category::Inference,
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The category of a gRPC method, from its path (`/package.Service/Method`).
pub fn grpc_category(path: &str) -> Option<Category> {
    let method = path.rsplit('/').next()?;
    Some(match method {
        "ServerLive" | "ServerReady" | "ModelReady" | "Check" => Category::Health,
        "ServerMetadata" | "ModelMetadata" => Category::Metadata,
        "ModelInfer" | "ModelStreamInfer" => Category::Inference,
        "ModelConfig" => Category::ModelConfig,
        "ModelStatistics" => Category::Statistics,
        "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => Category::ModelRepository,
        "TraceSetting" => Category::Trace,
        "LogSettings" => Category::Logging,
        method if method.contains("SharedMemory") => Category::SharedMemory,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_as_tritonserver_parses_them() {
        let both = Restrictions::parse(&["inference,model-config:admin-key=s3cret".into()], "", "api").unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(both.check(Category::Inference, &headers), Err("admin-key"));
        assert_eq!(both.check(Category::Health, &headers), Ok(()));
        headers.insert("admin-key", "s3cret".parse().unwrap());
        assert_eq!(both.check(Category::ModelConfig, &headers), Ok(()));
        let unknown = Restrictions::parse(&["gpu:k=v".into()], "", "api").unwrap_err();
        assert_eq!(unknown, "unknown restricted api 'gpu'");
        let twice = Restrictions::parse(&["health:a=1".into(), "health:b=2".into()], "", "protocol").unwrap_err();
        assert_eq!(twice, "restricted protocol 'health' can not be specified in multiple config groups");
        let grpc = Restrictions::parse(&["logging:Key=v".into()], GRPC_HEADER_PREFIX, "protocol").unwrap();
        assert_eq!(grpc.check(Category::Logging, &HeaderMap::new()), Err("triton-grpc-protocol-key"));
    }

    #[test]
    fn routes_fall_in_tritons_categories() {
        assert_eq!(http_category("/v2"), Some(Category::Metadata));
        assert_eq!(http_category("/v2/models/simple/versions/1/infer"), Some(Category::Inference));
        assert_eq!(http_category("/v2/models/simple/ready"), Some(Category::Health));
        assert_eq!(http_category("/v2/models/stats"), Some(Category::Statistics));
        assert_eq!(http_category("/v2/systemsharedmemory/region/r/register"), Some(Category::SharedMemory));
        assert_eq!(
            grpc_category("/inference.GRPCInferenceService/CudaSharedMemoryStatus"),
            Some(Category::SharedMemory)
        );
        assert_eq!(grpc_category("/grpc.health.v1.Health/Check"), Some(Category::Health));
    }
}
