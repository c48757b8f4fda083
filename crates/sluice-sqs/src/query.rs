//! The query protocol of SDKs older than the AWS JSON protocol (boto3 before 1.34.90, the AWS
//! CLI v1 of that time, Java v1 and hand-written clients): form-encoded parameters with
//! `Action=<Operation>`, flattened lists and maps (`AttributeName.1`, `Attribute.1.Name` /
//! `Attribute.1.Value`, `SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue`)
//! and XML answers.
//!
//! A query request is translated into the JSON input of the same operation and its JSON
//! answer into XML, so both protocols run the same code and follow the same rules; only the
//! names of flattened members differ, and they are listed here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::error::SqsError;

/// The XML namespace of SQS answers.
const NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

/// Parameters that authenticate or version a request rather than being part of its input.
const ENVELOPE: &[&str] = &[
    "Action",
    "Version",
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
    "AWSAccessKeyId",
    "SignatureVersion",
    "SignatureMethod",
    "Signature",
    "Timestamp",
    "Expires",
];

/// Flattened lists: the name each element is sent under, and the member's JSON name.
const LISTS: &[(&str, &str)] = &[
    ("AttributeName", "AttributeNames"),
    ("MessageAttributeName", "MessageAttributeNames"),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
    ("TagKey", "TagKeys"),
    ("AWSAccountId", "AWSAccountIds"),
    ("ActionName", "Actions"),
    ("SendMessageBatchRequestEntry", "Entries"),
    ("DeleteMessageBatchRequestEntry", "Entries"),
    ("ChangeMessageVisibilityBatchRequestEntry", "Entries"),
];

/// Flattened maps: the name entries are sent under, the member's JSON name, and the names of
/// an entry's key and value.
const MAPS: &[(&str, &str, &str, &str)] = &[
    ("Attribute", "Attributes", "Name", "Value"),
    ("MessageAttribute", "MessageAttributes", "Name", "Value"),
    (
        "MessageSystemAttribute",
        "MessageSystemAttributes",
        "Name",
        "Value",
    ),
    ("Tags", "Tags", "Key", "Value"),
];

/// The most parameters one request may carry: a full batch of ten messages with ten
/// attributes each stays far below it.
const MAX_PARAMETERS: usize = 1_000;

/// The most dotted segments in one parameter name: the deepest SQS member
/// (`SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringListValue.1`) has seven.
const MAX_DEPTH: usize = 8;

/// Integer members, sent as text and read as numbers.
const INTEGERS: &[&str] = &[
    "DelaySeconds",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "MaxResults",
    "MaxNumberOfMessagesPerSecond",
];

/// A query request: its operation and its input as the JSON protocol would carry it.
#[derive(Debug)]
pub(crate) struct QueryRequest {
    /// The operation (`Action=`).
    pub(crate) action: String,
    /// The input in the JSON protocol's form.
    pub(crate) input: Value,
}

/// Reads a query request from its parameters (URL query and form body together) and the
/// path it was sent to: a path other than `/` is the queue's URL, which older clients address
/// instead of sending `QueueUrl`.
pub(crate) fn read(params: &[(String, String)], path: &str) -> Result<QueryRequest, SqsError> {
    let action = params
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
        .ok_or_else(|| SqsError::missing_parameter("Action"))?;
    if params.len() > MAX_PARAMETERS {
        return Err(SqsError::invalid_parameter(format!(
            "The request carries {} parameters; at most {MAX_PARAMETERS} are accepted.",
            params.len()
        )));
    }
    let mut tree = Node::Branch(BTreeMap::new());
    for (key, value) in params {
        if ENVELOPE.contains(&key.as_str()) {
            continue;
        }
        if key.split('.').count() > MAX_DEPTH {
            return Err(SqsError::invalid_parameter(format!(
                "The parameter name {key:?} has more than {MAX_DEPTH} dotted parts; no SQS \
                 parameter is that deep."
            )));
        }
        tree.insert(key.split('.'), value)?;
    }
    let Node::Branch(members) = tree else {
        unreachable!("the root is a branch")
    };
    let mut input = fields(&action, &members)?;
    if !path.trim_matches('/').is_empty() && !input.contains_key("QueueUrl") {
        input.insert("QueueUrl".to_owned(), Value::String(path.to_owned()));
    }
    Ok(QueryRequest {
        action,
        input: Value::Object(input),
    })
}

/// Parameters as a tree of their dotted names.
#[derive(Debug)]
enum Node {
    Leaf(String),
    Branch(BTreeMap<String, Node>),
}

impl Node {
    fn insert<'a>(
        &mut self,
        mut path: impl Iterator<Item = &'a str>,
        value: &str,
    ) -> Result<(), SqsError> {
        let Some(segment) = path.next() else {
            match self {
                // An empty value for a list or map (as the query serializer sends an empty
                // list) yields to its elements.
                Node::Branch(m) if !m.is_empty() && value.is_empty() => {}
                Node::Branch(m) if !m.is_empty() => {
                    return Err(SqsError::invalid_parameter(format!(
                        "A parameter is given both as the value {value:?} and as members."
                    )));
                }
                _ => *self = Node::Leaf(value.to_owned()),
            }
            return Ok(());
        };
        if let Node::Leaf(v) = self {
            if !v.is_empty() {
                return Err(SqsError::invalid_parameter(format!(
                    "The parameter {segment} is given both as a value and as members."
                )));
            }
            *self = Node::Branch(BTreeMap::new());
        }
        let Node::Branch(children) = self else {
            unreachable!("made a branch above")
        };
        children
            .entry(segment.to_owned())
            .or_insert_with(|| Node::Branch(BTreeMap::new()))
            .insert(path, value)
    }
}

/// The JSON members of a structure whose query members are `members`.
fn fields(action: &str, members: &BTreeMap<String, Node>) -> Result<Map<String, Value>, SqsError> {
    let mut out = Map::new();
    for (name, node) in members {
        let (json_name, value) = member(action, name, node)?;
        out.insert(json_name, value);
    }
    Ok(out)
}

/// One member: its JSON name and value.
fn member(action: &str, name: &str, node: &Node) -> Result<(String, Value), SqsError> {
    // A list or map may also come by its JSON name: the query serializer sends an empty one
    // as `AttributeNames=`.
    if let Some((_, json)) = LISTS.iter().find(|(q, j)| *q == name || *j == name) {
        let items = indexed(name, node)?
            .into_iter()
            .map(|(_, n)| element(action, n))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(((*json).to_owned(), Value::Array(items)));
    }
    // Tags come as `Tag.N.Key` / `Tag.N.Value`; CreateQueue's member is `tags` in the JSON
    // model, TagQueue's `Tags`.
    let map = if name == "Tag" {
        let json = if action == "CreateQueue" {
            "tags"
        } else {
            "Tags"
        };
        Some((json, "Key", "Value"))
    } else {
        MAPS.iter()
            .find(|(q, j, ..)| *q == name || *j == name)
            .map(|(_, json, k, v)| (*json, *k, *v))
    };
    if let Some((json, key_name, value_name)) = map {
        let mut entries = Map::new();
        for (index, entry) in indexed(name, node)? {
            let Node::Branch(parts) = entry else {
                return Err(SqsError::invalid_parameter(format!(
                    "{name}.{index} needs {name}.{index}.{key_name} and \
                     {name}.{index}.{value_name}."
                )));
            };
            let key = match parts.get(key_name) {
                Some(Node::Leaf(k)) => k.clone(),
                _ => {
                    return Err(SqsError::missing_parameter(&format!(
                        "{name}.{index}.{key_name}"
                    )));
                }
            };
            let value = match parts.get(value_name) {
                Some(v) => element(action, v)?,
                None => {
                    return Err(SqsError::missing_parameter(&format!(
                        "{name}.{index}.{value_name}"
                    )));
                }
            };
            entries.insert(key, value);
        }
        return Ok((json.to_owned(), Value::Object(entries)));
    }
    let value = match node {
        Node::Leaf(text) if INTEGERS.contains(&name) => text
            .parse::<i64>()
            .map_or_else(|_| Value::String(text.clone()), Value::from),
        other => element(action, other)?,
    };
    Ok((name.to_owned(), value))
}

/// A value: text, or a structure of members.
fn element(action: &str, node: &Node) -> Result<Value, SqsError> {
    match node {
        Node::Leaf(text) => Ok(Value::String(text.clone())),
        Node::Branch(members) => fields(action, members).map(Value::Object),
    }
}

/// The elements of a flattened list or map, in index order (`Name.1`, `Name.2`, …). An empty
/// value is an empty list, and a single unnumbered value a list of one.
fn indexed<'a>(name: &str, node: &'a Node) -> Result<Vec<(u32, &'a Node)>, SqsError> {
    match node {
        Node::Leaf(text) if text.is_empty() => Ok(Vec::new()),
        Node::Leaf(_) => Ok(vec![(1, node)]),
        Node::Branch(children) => {
            let mut items = children
                .iter()
                .map(|(index, child)| match index.parse::<u32>() {
                    Ok(i) if i > 0 => Ok((i, child)),
                    _ => Err(SqsError::invalid_parameter(format!(
                        "{name}.{index} is not a member: {name} is numbered from 1 \
                         ({name}.1, {name}.2, …)."
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            items.sort_by_key(|(i, _)| *i);
            Ok(items)
        }
    }
}

/// Flattened lists of answers: the JSON member and the element each item is written as.
fn list_element(action: &str, member: &str) -> Option<String> {
    match member {
        "QueueUrls" | "queueUrls" => Some("QueueUrl".to_owned()),
        "Messages" => Some("Message".to_owned()),
        "Failed" => Some("BatchResultErrorEntry".to_owned()),
        "Successful" => Some(format!("{action}ResultEntry")),
        "Results" => Some("ListMessageMoveTasksResultEntry".to_owned()),
        _ => None,
    }
}

/// Flattened maps of answers: the element each entry is written as and its key's name.
fn map_element(member: &str) -> Option<(&'static str, &'static str)> {
    match member {
        "Attributes" => Some(("Attribute", "Name")),
        "MessageAttributes" => Some(("MessageAttribute", "Name")),
        "Tags" => Some(("Tag", "Key")),
        _ => None,
    }
}

/// Operations whose answer has no result, only the request id.
const NO_RESULT: &[&str] = &[
    "AddPermission",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "DeleteQueue",
    "PurgeQueue",
    "RemovePermission",
    "SetQueueAttributes",
    "TagQueue",
    "UntagQueue",
];

/// The XML answer of `action` whose JSON answer is `answer`.
pub(crate) fn answer(action: &str, answer: &Value, request_id: &str) -> Response {
    let mut xml = String::with_capacity(512);
    let _ = write!(
        xml,
        "<?xml version=\"1.0\"?><{action}Response xmlns=\"{NAMESPACE}\">"
    );
    if !NO_RESULT.contains(&action) {
        let _ = write!(xml, "<{action}Result>");
        if let Value::Object(members) = answer {
            write_members(&mut xml, action, members);
        }
        let _ = write!(xml, "</{action}Result>");
    }
    let _ = write!(
        xml,
        "<ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></{action}Response>",
        escape(request_id)
    );
    xml_response(axum::http::StatusCode::OK, xml)
}

/// The XML error answer.
pub(crate) fn error(e: &SqsError, request_id: &str) -> Response {
    let fault = if e.sender { "Sender" } else { "Receiver" };
    let xml = format!(
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{NAMESPACE}\"><Error><Type>{fault}</Type>\
         <Code>{}</Code><Message>{}</Message><Detail/></Error><RequestId>{}</RequestId>\
         </ErrorResponse>",
        escape(e.code),
        escape(&e.message),
        escape(request_id)
    );
    xml_response(e.status, xml)
}

fn xml_response(status: axum::http::StatusCode, xml: String) -> Response {
    let mut resp = (status, xml).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    resp
}

fn write_members(xml: &mut String, action: &str, members: &Map<String, Value>) {
    for (name, value) in members {
        match value {
            Value::Null => {}
            Value::Array(items) => {
                let element = list_element(action, name).unwrap_or_else(|| name.clone());
                for item in items {
                    write_element(xml, action, &element, item);
                }
            }
            Value::Object(entries) => match map_element(name) {
                Some((element, key)) => {
                    for (k, v) in entries {
                        let _ = write!(xml, "<{element}><{key}>{}</{key}>", escape(k));
                        write_element(xml, action, "Value", v);
                        let _ = write!(xml, "</{element}>");
                    }
                }
                None => write_element(xml, action, name, value),
            },
            _ => write_element(xml, action, name, value),
        }
    }
}

fn write_element(xml: &mut String, action: &str, name: &str, value: &Value) {
    let _ = write!(xml, "<{name}>");
    match value {
        Value::Object(members) => write_members(xml, action, members),
        Value::String(s) => xml.push_str(&escape(s)),
        Value::Null => {}
        other => {
            let _ = write!(xml, "{other}");
        }
    }
    let _ = write!(xml, "</{name}>");
}

/// Text as XML character data. Characters XML 1.0 cannot carry (most control characters)
/// are refused at an SQS send, but a message sent through Sluice's own API may hold them:
/// they become U+FFFD so that the answer stays well-formed.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c if crate::attributes::allowed_in_text(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn flattened_members_become_the_json_input() {
        let req = read(
            &params(&[
                ("Action", "SendMessageBatch"),
                ("Version", "2012-11-05"),
                ("QueueUrl", "http://h/000000000000/q"),
                ("SendMessageBatchRequestEntry.2.Id", "b"),
                ("SendMessageBatchRequestEntry.2.MessageBody", "two"),
                ("SendMessageBatchRequestEntry.10.Id", "c"),
                ("SendMessageBatchRequestEntry.10.MessageBody", "ten"),
                ("SendMessageBatchRequestEntry.1.Id", "a"),
                ("SendMessageBatchRequestEntry.1.MessageBody", "one"),
                ("SendMessageBatchRequestEntry.1.DelaySeconds", "5"),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name",
                    "k",
                ),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType",
                    "String",
                ),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue",
                    "v",
                ),
            ]),
            "/",
        )
        .unwrap();
        assert_eq!(req.action, "SendMessageBatch");
        assert_eq!(
            req.input,
            json!({
                "QueueUrl": "http://h/000000000000/q",
                "Entries": [
                    {"Id": "a", "MessageBody": "one", "DelaySeconds": 5,
                     "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
                    {"Id": "b", "MessageBody": "two"},
                    {"Id": "c", "MessageBody": "ten"},
                ]
            })
        );
    }

    #[test]
    fn maps_lists_tags_and_the_queue_path() {
        let req = read(
            &params(&[
                ("Action", "CreateQueue"),
                ("QueueName", "q"),
                ("Attribute.1.Name", "VisibilityTimeout"),
                ("Attribute.1.Value", "40"),
                ("Tag.1.Key", "team"),
                ("Tag.1.Value", "core"),
            ]),
            "/",
        )
        .unwrap();
        assert_eq!(
            req.input,
            json!({"QueueName": "q", "Attributes": {"VisibilityTimeout": "40"},
                   "tags": {"team": "core"}})
        );
        let req = read(
            &params(&[
                ("Action", "ReceiveMessage"),
                ("AttributeName.1", "All"),
                ("MessageAttributeNames", ""),
                ("MaxNumberOfMessages", "ten"),
            ]),
            "/000000000000/jobs",
        )
        .unwrap();
        assert_eq!(
            req.input,
            json!({"AttributeNames": ["All"], "MessageAttributeNames": [],
                   "MaxNumberOfMessages": "ten", "QueueUrl": "/000000000000/jobs"})
        );
        assert_eq!(
            read(&params(&[("QueueUrl", "x")]), "/").unwrap_err().code,
            "MissingParameter"
        );
        let bad = read(&params(&[("Action", "TagQueue"), ("Tags.x.Key", "a")]), "/").unwrap_err();
        assert!(bad.message.contains("numbered from 1"), "{bad}");
        let bad = read(&params(&[("Action", "TagQueue"), ("Tags.1.Key", "a")]), "/").unwrap_err();
        assert_eq!(
            bad.message,
            "The request must contain the parameter Tags.1.Value."
        );
    }

    #[test]
    fn deep_or_numerous_parameters_are_refused_before_they_are_read() {
        let deep = ["A"; 9].join(".");
        let err = read(&params(&[("Action", "SendMessage"), (&deep, "x")]), "/").unwrap_err();
        assert!(err.to_string().contains("dotted parts"), "{err}");
        let mut many = vec![("Action".to_owned(), "SendMessage".to_owned())];
        many.extend((0..1_000).map(|i| (format!("P{i}"), String::new())));
        let err = read(&many, "/").unwrap_err();
        assert!(err.to_string().contains("at most 1000"), "{err}");
    }

    #[test]
    fn text_xml_cannot_carry_becomes_a_replacement_character() {
        assert_eq!(escape("a\u{1}b\u{FFFE}<"), "a\u{FFFD}b\u{FFFD}&lt;");
    }

    #[test]
    fn answers_are_flattened_xml() {
        let value = json!({
            "Messages": [{
                "MessageId": "m1",
                "Body": "a < b & c",
                "Attributes": {"SentTimestamp": "1"},
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            }]
        });
        let resp = answer("ReceiveMessage", &value, "r1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/xml");
        let mut xml = String::new();
        write_members(&mut xml, "ReceiveMessage", value.as_object().unwrap());
        assert!(
            xml.starts_with("<Message>") && xml.ends_with("</Message>"),
            "{xml}"
        );
        for part in [
            "<Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute>",
            "<Body>a &lt; b &amp; c</Body>",
            "<MessageAttribute><Name>k</Name><Value>",
            "<StringValue>v</StringValue>",
            "<MessageId>m1</MessageId>",
        ] {
            assert!(xml.contains(part), "{part} in {xml}");
        }
        let mut xml = String::new();
        write_members(
            &mut xml,
            "DeleteMessageBatch",
            json!({"Successful": [{"Id": "a"}, {"Id": "c"}]})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            xml,
            "<DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>\
             <DeleteMessageBatchResultEntry><Id>c</Id></DeleteMessageBatchResultEntry>"
        );
        let mut xml = String::new();
        write_members(
            &mut xml,
            "DeleteMessageBatch",
            json!({"Failed": [{"SenderFault": true}]})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            xml,
            "<BatchResultErrorEntry><SenderFault>true</SenderFault></BatchResultErrorEntry>"
        );
    }
}
