//! Conversions between Python values and postbox's: bodies, durations, timestamps, properties.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postbox::binding::{FlatSend, FlatSendError};
use postbox::{Message, PropertyValue};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyMemoryView,
    PyString, PyTzInfo,
};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A message body: `bytes`, `bytearray`, `memoryview` or `str` (encoded as UTF-8).
pub fn body(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_cow()?.into_owned().into_bytes());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        // tobytes() copes with any format and with non-contiguous views.
        let bytes = obj.call_method0("tobytes")?;
        return Ok(bytes.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "a message body must be bytes, bytearray, memoryview or str, not {}",
        type_name(obj)
    )))
}

/// Bytes-like values only (property values that are not `str`).
fn bytes_like(obj: &Bound<'_, PyAny>) -> Option<PyResult<Vec<u8>>> {
    if obj.cast::<PyString>().is_ok() {
        return None;
    }
    if obj.cast::<PyBytes>().is_ok()
        || obj.cast::<PyByteArray>().is_ok()
        || obj.cast::<PyMemoryView>().is_ok()
    {
        return Some(body(obj));
    }
    None
}

/// Seconds as `int`/`float`, or a `datetime.timedelta`; never negative.
pub fn duration(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let secs = if let Ok(d) = obj.cast::<PyDelta>() {
        f64::from(d.get_days()) * 86_400.0
            + f64::from(d.get_seconds())
            + f64::from(d.get_microseconds()) / 1e6
    } else if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a number of seconds or a datetime.timedelta, not bool"
        )));
    } else {
        obj.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a number of seconds or a datetime.timedelta, not {}",
                type_name(obj)
            ))
        })?
    };
    if secs.is_nan() {
        return Err(PyValueError::new_err(format!("{what} must not be NaN")));
    }
    if secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must not be negative, got {secs} seconds"
        )));
    }
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

pub fn opt_duration(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    obj.map(|o| duration(o, what)).transpose()
}

/// A timeout in the manner of `queue.Queue.get`: `None` waits forever; otherwise the deadline.
pub fn deadline(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        // A deadline too far to represent is as good as forever.
        Some(t) => Ok(Instant::now().checked_add(duration(t, "timeout")?)),
    }
}

/// A `datetime` (aware, or naive meaning local time, as `datetime.timestamp()` reads it).
pub fn system_time(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<SystemTime> {
    if obj.cast::<PyDateTime>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a datetime.datetime, not {}",
            type_name(obj)
        )));
    }
    // `timestamp()` may be overridden (a subclass) to return anything a float can hold:
    // infinities and NaN are refused like any time out of range, never a panic.
    let ts: f64 = obj.call_method0("timestamp")?.extract()?;
    let t = if ts.is_nan() {
        None
    } else if ts >= 0.0 {
        Duration::try_from_secs_f64(ts)
            .ok()
            .and_then(|d| UNIX_EPOCH.checked_add(d))
    } else {
        Duration::try_from_secs_f64(-ts)
            .ok()
            .and_then(|d| UNIX_EPOCH.checked_sub(d))
    };
    t.ok_or_else(|| {
        crate::errors::invalid(format!("{what} is out of range (its timestamp() is {ts})"))
    })
}

/// `datetime.max` and `datetime.min` (UTC) as timestamps.
const MAX_TIMESTAMP: f64 = 253_402_300_799.0;
const MIN_TIMESTAMP: f64 = -62_135_596_800.0;

/// An aware `datetime` in UTC. A time past what `datetime` holds (a lock or TTL of "forever",
/// set as a huge duration) reads as `datetime.max` (or `datetime.min`) instead of failing.
pub fn datetime(py: Python<'_>, t: SystemTime) -> PyResult<Bound<'_, PyDateTime>> {
    let ts = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    let utc = PyTzInfo::utc(py)?;
    if ts >= MAX_TIMESTAMP + 1.0 {
        return PyDateTime::new(py, 9999, 12, 31, 23, 59, 59, 999_999, Some(&utc));
    }
    if ts < MIN_TIMESTAMP {
        return PyDateTime::new(py, 1, 1, 1, 0, 0, 0, 0, Some(&utc));
    }
    PyDateTime::from_timestamp(py, ts, Some(&utc))
}

pub fn opt_datetime(
    py: Python<'_>,
    t: Option<SystemTime>,
) -> PyResult<Option<Bound<'_, PyDateTime>>> {
    t.map(|t| datetime(py, t)).transpose()
}

pub fn timedelta(py: Python<'_>, d: Duration) -> PyResult<Bound<'_, PyDelta>> {
    let secs = d.as_secs();
    // `timedelta.max` has 999999999 days: a longer duration (set from Rust or C) reads as that.
    let days = i32::try_from(secs / 86_400)
        .unwrap_or(i32::MAX)
        .min(999_999_999);
    PyDelta::new(
        py,
        days,
        (secs % 86_400) as i32,
        d.subsec_micros() as i32,
        true,
    )
}

/// User properties: a `dict` of `str` keys to `str` or bytes-like values.
pub fn properties(obj: &Bound<'_, PyAny>) -> PyResult<BTreeMap<String, PropertyValue>> {
    let dict = obj.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "properties must be a dict of str to str or bytes, not {}",
            type_name(obj)
        ))
    })?;
    let mut out = BTreeMap::new();
    for (k, v) in dict.iter() {
        let key: String = k.extract().map_err(|_| {
            PyTypeError::new_err(format!("property names must be str, not {}", type_name(&k)))
        })?;
        let value = if let Ok(s) = v.cast::<PyString>() {
            PropertyValue::String(s.to_cow()?.into_owned())
        } else if let Some(b) = bytes_like(&v) {
            PropertyValue::Bytes(b?)
        } else {
            return Err(PyTypeError::new_err(format!(
                "property {key:?} must be str or bytes, not {}",
                type_name(&v)
            )));
        };
        out.insert(key, value);
    }
    Ok(out)
}

pub fn properties_to_py<'py>(
    py: Python<'py>,
    props: &BTreeMap<String, PropertyValue>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in props {
        match v {
            PropertyValue::String(s) => dict.set_item(k, s)?,
            PropertyValue::Bytes(b) => dict.set_item(k, PyBytes::new(py, b))?,
        }
    }
    Ok(dict)
}

/// The keyword arguments of `send`, parsed from a `**props` dict by `from_dict`: the one parser
/// behind every method that sends (`send`, `publish`, `send_checked`, `request`, `reply`, a
/// transaction's and a collator's `send`, job pieces and `send_batch` items).
#[derive(Default)]
struct SendArgs<'a, 'py> {
    label: Option<String>,
    content_type: Option<String>,
    priority: Option<&'a Bound<'py, PyAny>>,
    correlation_id: Option<String>,
    reply_to: Option<String>,
    ttl: Option<&'a Bound<'py, PyAny>>,
    delay: Option<&'a Bound<'py, PyAny>>,
    visible_at: Option<&'a Bound<'py, PyAny>>,
    expires_at: Option<&'a Bound<'py, PyAny>>,
    group: Option<String>,
    sequence: Option<u64>,
    properties: Option<&'a Bound<'py, PyAny>>,
    message_key: Option<String>,
}

impl SendArgs<'_, '_> {
    fn build(self, body: Vec<u8>) -> PyResult<Message> {
        let mut m = Message::new(body);
        let mut priority = None;
        if let Some(p) = self.priority {
            if p.is_instance_of::<PyBool>() {
                return Err(PyTypeError::new_err(
                    "priority must be an int from 0 to 7, not bool",
                ));
            }
            let p: i64 = p.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "priority must be an int from 0 to 7, not {}",
                    type_name(p)
                ))
            })?;
            priority = Some(i128::from(p));
        }
        if let Some(v) = self.label {
            m = m.label(v);
        }
        if let Some(v) = self.content_type {
            m = m.content_type(v);
        }
        if let Some(v) = self.correlation_id {
            m = m.correlation_id(v);
        }
        if let Some(v) = self.reply_to {
            m = m.reply_to(v);
        }
        if let Some(v) = self.message_key {
            m = m.message_key(v);
        }
        if let Some(v) = self.group {
            m = m.group(v);
        }
        if let Some(v) = self.sequence {
            m = m.sequence(v);
        }
        let times = FlatSend {
            priority,
            delay: self.delay.map(|d| duration(d, "delay")).transpose()?,
            visible_at: self
                .visible_at
                .map(|t| system_time(t, "visible_at"))
                .transpose()?,
            ttl: self.ttl.map(|d| duration(d, "ttl")).transpose()?,
            expires_at: self
                .expires_at
                .map(|t| system_time(t, "expires_at"))
                .transpose()?,
        };
        m = times.apply(m).map_err(|e| match e {
            FlatSendError::Priority(p) => {
                crate::errors::invalid(format!("priority must be from 0 to 7, got {p}"))
            }
            FlatSendError::DelayAndVisibleAt => {
                PyTypeError::new_err("give delay or visible_at, not both")
            }
            FlatSendError::TtlAndExpiresAt => {
                PyTypeError::new_err("give ttl or expires_at, not both")
            }
        })?;
        if let Some(p) = self.properties {
            for (k, v) in properties(p)? {
                m = m.property(k, v);
            }
        }
        Ok(m)
    }
}

const SEND_KEYS: &[&str] = &[
    "body",
    "label",
    "content_type",
    "priority",
    "correlation_id",
    "reply_to",
    "ttl",
    "delay",
    "visible_at",
    "expires_at",
    "group",
    "sequence",
    "properties",
    "message_key",
];

fn opt_item<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => match v.extract::<T>() {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                let e: PyErr = e.into();
                Err(PyTypeError::new_err(format!("{key}: {}", e.value(d.py()))))
            }
        },
    }
}

/// A message from a dict of `send`'s keywords (`None` values count as absent) and a body.
fn from_dict(d: &Bound<'_, PyDict>, body: Vec<u8>) -> PyResult<Message> {
    let (priority, ttl, delay, visible_at, expires_at, props) = (
        d.get_item("priority")?.filter(|v| !v.is_none()),
        d.get_item("ttl")?.filter(|v| !v.is_none()),
        d.get_item("delay")?.filter(|v| !v.is_none()),
        d.get_item("visible_at")?.filter(|v| !v.is_none()),
        d.get_item("expires_at")?.filter(|v| !v.is_none()),
        d.get_item("properties")?.filter(|v| !v.is_none()),
    );
    SendArgs {
        label: opt_item(d, "label")?,
        content_type: opt_item(d, "content_type")?,
        priority: priority.as_ref(),
        correlation_id: opt_item(d, "correlation_id")?,
        reply_to: opt_item(d, "reply_to")?,
        ttl: ttl.as_ref(),
        delay: delay.as_ref(),
        visible_at: visible_at.as_ref(),
        expires_at: expires_at.as_ref(),
        group: opt_item(d, "group")?,
        sequence: opt_item(d, "sequence")?,
        properties: props.as_ref(),
        message_key: opt_item(d, "message_key")?,
    }
    .build(body)
}

/// One item of `send_batch`: a body, or a dict with a `"body"` key and `send`'s keywords.
pub fn batch_item(item: &Bound<'_, PyAny>) -> PyResult<Message> {
    let Ok(d) = item.cast::<PyDict>() else {
        return body(item).map(Message::new);
    };
    for k in d.keys() {
        let k: String = k.extract()?;
        if !SEND_KEYS.contains(&k.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "unexpected key {k:?} in a send_batch item (expected body and send's keywords)"
            )));
        }
    }
    let b = d
        .get_item("body")?
        .ok_or_else(|| PyTypeError::new_err("a send_batch dict needs a \"body\" key"))?;
    from_dict(d, body(&b)?)
}

/// A message from `body` and `send`'s keywords given as `**props`, for `method` (named in the
/// error for an unknown keyword).
pub fn message(
    body_obj: &Bound<'_, PyAny>,
    props: Option<&Bound<'_, PyDict>>,
    method: &str,
) -> PyResult<Message> {
    let body = body(body_obj)?;
    let Some(d) = props else {
        return Ok(Message::new(body));
    };
    for k in d.keys() {
        let k: String = k.extract()?;
        if k == "body" || !SEND_KEYS.contains(&k.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "{method}() got an unexpected keyword argument '{k}' (expected send's keywords: {})",
                SEND_KEYS[1..].join(", ")
            )));
        }
    }
    from_dict(d, body)
}
