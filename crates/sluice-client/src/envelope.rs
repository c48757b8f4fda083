//! The task envelope: the JSON body `{"task": "<name>", "args": [...], "kwargs":
//! {...}}` that every Sluice SDK reads and writes, so a task enqueued from Python runs on a
//! Rust worker and the other way round.
//!
//! # How a Rust value maps to `args` and `kwargs`
//! Rust has no keyword arguments, so one value stands for the whole argument list:
//!
//! | the value serializes to | envelope | a Python handler gets |
//! |---|---|---|
//! | an object (a struct, a map) | `"args": [], "kwargs": {…}` | `f(**kwargs)` |
//! | an array (a tuple, a `Vec`) | `"args": […], "kwargs": {}` | `f(*args)` |
//! | `null` (`()`, `None`) | `"args": [], "kwargs": {}` | `f()` |
//! | anything else (a number, a string) | `"args": [value], "kwargs": {}` | `f(value)` |
//!
//! A handler's input type is read back by the same rules, trying in order: `kwargs` as an
//! object when there are no `args`; the single argument, then the `args` array; `null` when
//! both are empty. So a struct, a tuple, a scalar and `()` all round-trip. To pass one list as
//! a single positional argument, wrap it in a one-tuple: `(vec![1, 2],)`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::body::{DecodedBody, OutgoingMessage};
use crate::error::{Error, Result};
use crate::json::to_raw;

/// A task envelope: which task to run and its arguments.
///
/// ```
/// # fn f() -> Result<(), sluice_client::Error> {
/// use sluice_client::TaskEnvelope;
/// #[derive(serde::Serialize)]
/// struct Resize { url: String, width: u32 }
/// let env = TaskEnvelope::new("resize", &Resize { url: "s3://a.png".into(), width: 64 })?;
/// assert_eq!(env.kwargs["width"], 64);
/// let env = TaskEnvelope::new("add", &(1, 2))?;
/// assert_eq!(env.args, vec![serde_json::json!(1), serde_json::json!(2)]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEnvelope {
    /// The registered name of the task.
    pub task: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub kwargs: Map<String, Value>,
}

impl TaskEnvelope {
    /// An envelope for `task` whose arguments are `args`, mapped as the module docs say.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty task name, or arguments that JSON cannot represent
    /// (a NaN, a map with non-string keys); the message says where and how to fix it.
    pub fn new<A: Serialize + ?Sized>(task: impl Into<String>, args: &A) -> Result<Self> {
        let task = task.into();
        if task.is_empty() {
            return Err(Error::InvalidInput(
                "a task needs a name: pass the name its handler was registered under".to_owned(),
            ));
        }
        let raw = to_raw(&format!("the arguments of task \"{task}\""), args)?;
        let value: Value = serde_json::from_str(raw.get())
            .map_err(|e| Error::InvalidInput(format!("arguments of task \"{task}\": {e}")))?;
        let (args, kwargs) = match value {
            Value::Object(m) => (Vec::new(), m),
            Value::Array(a) => (a, Map::new()),
            Value::Null => (Vec::new(), Map::new()),
            v => (vec![v], Map::new()),
        };
        Ok(TaskEnvelope { task, args, kwargs })
    }

    /// Adds a positional argument.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `value` cannot be JSON.
    pub fn arg<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Self> {
        self.args.push(to_value("an argument", value)?);
        Ok(self)
    }

    /// Adds a keyword argument.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `value` cannot be JSON.
    pub fn kwarg<T: Serialize + ?Sized>(
        mut self,
        name: impl Into<String>,
        value: &T,
    ) -> Result<Self> {
        let name = name.into();
        let v = to_value(&format!("keyword argument \"{name}\""), value)?;
        self.kwargs.insert(name, v);
        Ok(self)
    }

    /// The message carrying this envelope, to add a delay, attributes or a dedup id before
    /// [`crate::Client::send`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the envelope cannot be JSON (it always can when built by
    /// [`TaskEnvelope::new`]).
    pub fn to_message(&self) -> Result<OutgoingMessage> {
        OutgoingMessage::json(self)
    }

    /// Reads an envelope from a message body.
    ///
    /// # Errors
    /// [`Error::Decode`] when the body is not JSON, not an object, or has no string `task`
    /// (or `args` that is not an array, `kwargs` that is not an object).
    pub fn from_body(body: &DecodedBody) -> Result<Self> {
        let text = match body {
            DecodedBody::Json(t) => t,
            DecodedBody::Text(_) => {
                return Err(Error::Decode(
                    "the body is plain text, not a JSON task envelope".to_owned(),
                ));
            }
            DecodedBody::Bytes(b) => {
                return Err(Error::Decode(format!(
                    "the body is {} bytes of binary data, not a JSON task envelope",
                    b.len()
                )));
            }
        };
        let env: TaskEnvelope = serde_json::from_str(text).map_err(|e| {
            Error::Decode(format!(
                "the body is not a task envelope {{\"task\", \"args\", \"kwargs\"}}: {e}"
            ))
        })?;
        if env.task.is_empty() {
            return Err(Error::Decode(
                "the envelope's task name is empty".to_owned(),
            ));
        }
        Ok(env)
    }

    /// The arguments as a handler's input type, by the rules of the module docs.
    ///
    /// # Errors
    /// [`Error::Decode`] with the first reading's error when no reading fits `T`.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T> {
        let mut candidates: Vec<Value> = Vec::with_capacity(2);
        match (self.args.len(), self.kwargs.is_empty()) {
            (0, false) => candidates.push(Value::Object(self.kwargs.clone())),
            (0, true) => {
                candidates.push(Value::Null);
                candidates.push(Value::Array(Vec::new()));
                candidates.push(Value::Object(Map::new()));
            }
            (1, true) => {
                candidates.push(self.args[0].clone());
                candidates.push(Value::Array(self.args.clone()));
            }
            (_, true) => candidates.push(Value::Array(self.args.clone())),
            (_, false) => {
                let mut both = Map::new();
                both.insert("args".into(), Value::Array(self.args.clone()));
                both.insert("kwargs".into(), Value::Object(self.kwargs.clone()));
                candidates.push(Value::Object(both));
            }
        }
        let mut first = None;
        for c in candidates {
            match serde_json::from_value::<T>(c) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(Error::Decode(format!(
            "the arguments of task \"{}\" do not fit the handler's input type: {}",
            self.task,
            first.map(|e| e.to_string()).unwrap_or_default()
        )))
    }
}

fn to_value<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<Value> {
    let raw = to_raw(what, value)?;
    serde_json::from_str(raw.get()).map_err(|e| Error::InvalidInput(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Resize {
        url: String,
        width: u32,
    }

    fn round<T: Serialize + DeserializeOwned>(v: &T) -> T {
        let env = TaskEnvelope::new("t", v).unwrap();
        let text = serde_json::to_string(&env).unwrap();
        TaskEnvelope::from_body(&DecodedBody::Json(text))
            .unwrap()
            .input()
            .unwrap()
    }

    #[test]
    fn values_round_trip() {
        let r = Resize {
            url: "u".into(),
            width: 3,
        };
        assert_eq!(round(&r), r);
        assert_eq!(round(&(1, "a".to_string())), (1, "a".to_string()));
        assert_eq!(round(&5u32), 5);
        assert_eq!(round(&vec![1, 2]), vec![1, 2]);
        assert_eq!(round(&vec![7]), vec![7]);
        round(&());
        assert_eq!(round(&Some(4)), Some(4));
    }

    #[test]
    fn interoperates_with_other_sdks() {
        let py = r#"{"task": "add", "args": [1, 2], "kwargs": {}, "id": "extra fields are fine"}"#;
        let env = TaskEnvelope::from_body(&DecodedBody::Json(py.into())).unwrap();
        assert_eq!(env.input::<(i64, i64)>().unwrap(), (1, 2));
        let only_task =
            TaskEnvelope::from_body(&DecodedBody::Json(r#"{"task": "ping"}"#.into())).unwrap();
        only_task.input::<()>().unwrap();
        let out = serde_json::to_value(TaskEnvelope::new("add", &(1, 2)).unwrap()).unwrap();
        assert_eq!(out, json!({"task": "add", "args": [1, 2], "kwargs": {}}));
    }

    #[test]
    fn bad_bodies_and_args_are_explained() {
        for body in [
            DecodedBody::Bytes(vec![0xff, 0]),
            DecodedBody::Text("hi".into()),
            DecodedBody::Json("[1]".into()),
            DecodedBody::Json(r#"{"args": []}"#.into()),
            DecodedBody::Json(r#"{"task": ""}"#.into()),
        ] {
            assert!(matches!(
                TaskEnvelope::from_body(&body),
                Err(Error::Decode(_))
            ));
        }
        let env = TaskEnvelope::new("resize", &json!({"url": 1})).unwrap();
        let e = env.input::<Resize>().unwrap_err().to_string();
        assert!(e.contains("resize") && e.contains("invalid type"), "{e}");
        let e = TaskEnvelope::new("t", &f64::NAN).unwrap_err().to_string();
        assert!(e.contains("NaN") && e.contains("task \"t\""), "{e}");
    }
}
