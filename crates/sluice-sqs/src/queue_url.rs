//! Queue URLs and ARNs. A queue's URL is `<base>/<account>/<name>` and its ARN
//! `arn:aws:sqs:<region>:<account>:<name>`; the base is the configured public URL of the SQS
//! listener, or else the scheme and `Host` of the request. A URL is read back by its last path
//! segment, whatever its host, as SQS-compatible servers do: clients keep the URLs they were
//! given, and a proxy in front may have changed the host.

use sluice_core::QueueName;

use crate::error::SqsError;

/// Account and region as URLs and ARNs show them.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The 12-digit account id (any value; SDKs only echo it).
    pub account: String,
    /// The region name.
    pub region: String,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            account: "000000000000".to_owned(),
            region: "us-east-1".to_owned(),
        }
    }
}

impl Identity {
    /// The queue's URL under `base` (no trailing slash).
    pub fn url(&self, base: &str, queue: &str) -> String {
        format!("{base}/{}/{queue}", self.account)
    }

    /// The queue's ARN.
    pub fn arn(&self, queue: &str) -> String {
        format!("arn:aws:sqs:{}:{}:{queue}", self.region, self.account)
    }
}

/// The queue a `QueueUrl` names.
///
/// # Errors
/// `QueueDoesNotExist` when the URL's last segment is not a queue name.
pub fn queue_of_url(url: &str) -> Result<QueueName, SqsError> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let last = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    QueueName::new(last).map_err(|_| SqsError::no_queue())
}

/// The queue an ARN names (`arn:aws:sqs:<region>:<account>:<name>`), or a bare name.
///
/// # Errors
/// `InvalidParameterValue` when it is neither.
pub fn queue_of_arn(arn: &str) -> Result<QueueName, SqsError> {
    let name = if arn.starts_with("arn:") {
        let parts: Vec<&str> = arn.split(':').collect();
        match parts.as_slice() {
            ["arn", _, "sqs", _, _, name] => *name,
            _ => {
                return Err(SqsError::invalid_parameter(format!(
                    "{arn} is not the ARN of a queue (arn:aws:sqs:<region>:<account>:<name>)."
                )));
            }
        }
    } else {
        arn
    };
    QueueName::new(name).map_err(|e| SqsError::invalid_parameter(e.to_string()))
}

/// Checks an SQS queue name: 1 to 80 of `[A-Za-z0-9_-]`, and `.fifo` at the end of a FIFO
/// queue's.
///
/// # Errors
/// `InvalidParameterValue` saying the rule.
pub fn check_sqs_name(name: &str) -> Result<QueueName, SqsError> {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    let ok = !stem.is_empty()
        && name.len() <= 80
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !ok {
        return Err(SqsError::invalid_parameter(format!(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in \
             length (a FIFO queue's name ends in .fifo); got \"{name}\"."
        )));
    }
    QueueName::new(name).map_err(|e| SqsError::invalid_parameter(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_arns_name_their_queue() {
        let id = Identity::default();
        let url = id.url("http://127.0.0.1:9324", "jobs");
        assert_eq!(url, "http://127.0.0.1:9324/000000000000/jobs");
        assert_eq!(queue_of_url(&url).unwrap().as_str(), "jobs");
        assert_eq!(
            queue_of_url("https://elsewhere/1/jobs/").unwrap().as_str(),
            "jobs"
        );
        assert_eq!(queue_of_arn(&id.arn("jobs")).unwrap().as_str(), "jobs");
        assert_eq!(queue_of_arn("jobs").unwrap().as_str(), "jobs");
        assert!(queue_of_arn("arn:aws:sns:r:a:topic").is_err());
    }

    #[test]
    fn sqs_names_follow_sqs_rules() {
        assert!(check_sqs_name("orders-1_x").is_ok());
        assert!(check_sqs_name("orders.fifo").is_ok());
        for bad in ["", ".fifo", "a.b", "a b", &"x".repeat(81)] {
            assert!(check_sqs_name(bad).is_err(), "{bad}");
        }
    }
}
