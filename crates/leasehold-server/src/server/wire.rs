//! What arrives on the wire before it is a request: the one place where
//! bytes that do not make a valid request message are refused, in the
//! server's own terms.
//!
//! Two things can be wrong with a request message before any handler sees
//! it, and tonic would report both in its terms: OUT_OF_RANGE ("decoded
//! message length too large") for a message over the size limit, and
//! INTERNAL ("failed to decode Protobuf message") for one that does not
//! decode, such as invalid UTF-8 in a `string` field. Neither names a
//! field, neither carries an `ErrorInfo`, and on a bidirectional stream the
//! handler used to take either for the end of the stream and close it with
//! OK. Here both become INVALID_ARGUMENT with reason INVALID_ARGUMENT and
//! the field at fault, the answer any other bad input gets
//! ([`crate::server::grpc_status`]):
//!
//! - **Too large.** [`WireLayer`] reads the length prefix of every message
//!   of a leasehold call as it arrives ([`FrameGuard`]). A message longer
//!   than the server decodes is never buffered whole: the guard reads at
//!   most that many of its bytes, follows the protobuf fields in them
//!   (their lengths come before their bytes) and names the first field
//!   that is over its own limit (`value`: "is 20971520 bytes, the limit is
//!   65536 bytes", the words [`Limits`] uses for a value decoded), or else
//!   the field that carries the message past the limit (`writes`: send
//!   fewer per message). The guard yields that error instead of the
//!   message, and tonic hands it on unchanged: to the unary call, which
//!   answers it, and to the stream's next `message()`, after the messages
//!   before it. The field names come from the descriptor set the server
//!   serves for reflection, so they cannot drift from the proto.
//! - **Does not decode.** prost names the message and field it failed in
//!   (`CheckedWriteRequest.job: WriteStreamRequest.writes: invalid string
//!   value: ...`); tonic hands that on as text only, and one function
//!   (`undecodable`) reads it into the field's path from the request
//!   (`writes.job`) and prost's cause. tonic answers a unary request that
//!   does not decode before any handler runs, so [`WireLayer`] maps that
//!   reply; the stream handlers map what their stream's `message()` returns
//!   with [`request_error`].
//!
//! Every refusal is first a [`WireError`], the reason as data; it is put
//! into words (the client's message, the field in the `ErrorInfo`) in one
//! place, its conversion into the server's [`Error`].
//!
//! Nothing on the path of a valid request changes but the reading of each
//! five-byte length prefix.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::Frame;
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::{Code, Status};
use tower::{Layer, Service};

use crate::error::{Error, Result};
use crate::lease::{too_long, Limits};
use crate::server::grpc_status::to_status;

/// The shape of a request message: what the guard needs to name a field
/// from its number.
#[derive(Debug)]
struct Shape {
    fields: HashMap<u32, Field>,
}

#[derive(Debug)]
struct Field {
    name: String,
    repeated: bool,
    /// The most bytes the field may hold, where it has a limit.
    limit: Option<usize>,
    /// The field's own shape, when it is a message of this API.
    message: Option<Arc<Shape>>,
}

/// The request shape of every leasehold method, by path
/// (`/leasehold.v1.Leases/Acquire`), with the limits of its fields.
#[derive(Debug)]
pub struct Schema {
    methods: HashMap<String, Arc<Shape>>,
}

impl Schema {
    /// Reads the request shapes from the encoded descriptor set `fds`, with
    /// the size limits of `limits`.
    pub fn new(fds: &[u8], limits: &Limits) -> Result<Schema> {
        let fds = FileDescriptorSet::decode(fds).map_err(Error::serve)?;
        let mut messages = HashMap::new();
        for file in &fds.file {
            let package = file.package();
            for m in &file.message_type {
                messages.insert(format!(".{package}.{}", m.name()), m);
            }
        }
        let mut shapes = HashMap::new();
        let mut methods = HashMap::new();
        for file in &fds.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    if let Some(shape) =
                        shape_of(method.input_type(), &messages, &mut shapes, limits)
                    {
                        methods.insert(path, shape);
                    }
                }
            }
        }
        Ok(Schema { methods })
    }

    fn request(&self, path: &str) -> Option<&Arc<Shape>> {
        self.methods.get(path)
    }
}

/// The shape of the message `type_name` (`.leasehold.v1.AcquireRequest`),
/// made once per message.
fn shape_of(
    type_name: &str,
    messages: &HashMap<String, &DescriptorProto>,
    shapes: &mut HashMap<String, Arc<Shape>>,
    limits: &Limits,
) -> Option<Arc<Shape>> {
    if let Some(s) = shapes.get(type_name) {
        return Some(s.clone());
    }
    let m = messages.get(type_name)?;
    let mut fields = HashMap::new();
    for f in &m.field {
        let message = match f.r#type() {
            // Requests do not nest themselves, so this ends.
            Type::Message => shape_of(f.type_name(), messages, shapes, limits),
            _ => None,
        };
        fields.insert(
            f.number() as u32,
            Field {
                name: f.name().to_owned(),
                repeated: f.label() == Label::Repeated,
                limit: field_limit(limits, m.name(), f.name()),
                message,
            },
        );
    }
    let shape = Arc::new(Shape { fields });
    shapes.insert(type_name.to_owned(), shape.clone());
    Some(shape)
}

/// The size limit of a request field that has one: the limit [`Limits`]
/// checks once the message is decoded, read here off the field's length
/// prefix when the message is too large to decode.
fn field_limit(l: &Limits, message: &str, field: &str) -> Option<usize> {
    match (message, field) {
        (_, "job" | "holder") => Some(l.max_name_bytes),
        ("ListLeasesRequest", "prefix") => Some(l.max_name_bytes),
        (_, "key" | "prefix") => Some(l.max_key_bytes),
        ("CheckedWriteRequest", "value") => Some(l.max_value_bytes),
        ("CheckedWriteRequest", "proof") => Some(super::convert::MAX_PROOF_BYTES),
        ("AcquireRequest" | "RenewRequest", "value") => Some(crate::lease::MAX_LEASE_VALUE_BYTES),
        _ => None,
    }
}

/// What [`find_fault`] learned from the start of a message too large.
#[derive(Debug, PartialEq)]
enum Fault {
    /// A field over its own limit: its path in the request, its length and
    /// its limit.
    Over {
        field: String,
        len: usize,
        limit: usize,
    },
    /// The field (at the top of the request) whose bytes carry the message
    /// past the limit; no field is over its own limit before it.
    Carries { field: String, repeated: bool },
    /// More bytes are needed to tell.
    NeedMore,
    /// The bytes are not a message of this shape.
    Unknown,
}

/// Follows the fields of a message of `shape` in `head`, the first bytes
/// of a message of which only `budget` bytes will be read. `path` is the
/// field path of this message in the request ("" at the top, `writes.`
/// inside a write).
fn find_fault(shape: &Shape, head: &[u8], budget: usize, path: &str) -> Fault {
    let mut pos = 0;
    loop {
        if pos >= budget {
            // Only a field that crosses the budget could have made the
            // message too large; a message of this shape has none.
            return Fault::Unknown;
        }
        let Some((key, n)) = varint(rest(head, pos)) else {
            return need_more(head, budget);
        };
        pos += n;
        let number = (key >> 3) as u32;
        match key & 7 {
            0 => match varint(rest(head, pos)) {
                Some((_, n)) => pos += n,
                None => return need_more(head, budget),
            },
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let Some((len, n)) = varint(rest(head, pos)) else {
                    return need_more(head, budget);
                };
                pos += n;
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                let Some(field) = shape.fields.get(&number) else {
                    if len > budget.saturating_sub(pos) {
                        return Fault::Unknown;
                    }
                    pos += len;
                    continue;
                };
                let name = format!("{path}{}", field.name);
                if let Some(limit) = field.limit.filter(|l| len > *l) {
                    return Fault::Over {
                        field: name,
                        len,
                        limit,
                    };
                }
                if len > budget.saturating_sub(pos) {
                    // This field carries the message past the limit. A
                    // field of it may be over its own limit: that is the
                    // one to name.
                    if let Some(inner) = &field.message {
                        let inner_budget = budget.saturating_sub(pos);
                        match find_fault(inner, rest(head, pos), inner_budget, &format!("{name}."))
                        {
                            over @ Fault::Over { .. } => return over,
                            Fault::NeedMore => return Fault::NeedMore,
                            Fault::Carries { .. } | Fault::Unknown => {}
                        }
                    }
                    return Fault::Carries {
                        field: name,
                        repeated: field.repeated,
                    };
                }
                pos += len;
            }
            _ => return Fault::Unknown,
        }
    }
}

/// The bytes of `head` from `pos` on; none when `pos` is past its end
/// (the bytes there have not come yet).
fn rest(head: &[u8], pos: usize) -> &[u8] {
    head.get(pos..).unwrap_or_default()
}

fn need_more(head: &[u8], budget: usize) -> Fault {
    if head.len() < budget {
        Fault::NeedMore
    } else {
        Fault::Unknown
    }
}

/// A protobuf varint at the start of `b`, and its length; `None` when `b`
/// ends first (or the varint is longer than ten bytes).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Why a request message is refused before it is a request: what the
/// guard found in a message over the size limit, or what prost said of
/// one that does not decode. Each becomes INVALID_ARGUMENT naming the
/// field, worded in one place ([`From<WireError> for Error`](Error)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Over the size limit, with a field over its own limit.
    FieldOverLimit {
        /// The field's path in the request (`writes.value`).
        field: String,
        /// Its length, in bytes.
        len: usize,
        /// Its own limit, in bytes.
        limit: usize,
    },
    /// Over the size limit, carried past it by a field of the request
    /// itself, with no field over its own limit before it.
    CarriedOverLimit {
        /// The field (`writes`).
        field: String,
        /// Whether it is repeated: the client can send fewer per message.
        repeated: bool,
        /// The message's length, in bytes.
        len: usize,
        /// The most the server decodes.
        max: usize,
    },
    /// Over the size limit, and its bytes name no field: compressed, not a
    /// message of its method's request, or of a method with no request
    /// shape.
    OverLimit {
        /// The message's length, in bytes.
        len: usize,
        /// The most the server decodes.
        max: usize,
    },
    /// prost could not decode it.
    Undecodable {
        /// The path in the request of the field it failed in
        /// (`writes.job`); empty when prost named none.
        field: String,
        /// Why, in prost's words (`invalid string value: data is not UTF-8
        /// encoded`).
        cause: String,
    },
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Error {
        match e {
            WireError::FieldOverLimit { field, len, limit } => too_long(field, len, limit),
            WireError::CarriedOverLimit {
                field,
                repeated,
                len,
                max,
            } => {
                let hint = if repeated {
                    format!(": send fewer {field} per message")
                } else {
                    String::new()
                };
                let message = format!("the message is {len} bytes, the limit is {max} bytes{hint}");
                Error::invalid(field, message)
            }
            WireError::OverLimit { len, max } => Error::invalid(
                "",
                format!("the message is {len} bytes, the limit is {max} bytes"),
            ),
            WireError::Undecodable { field, cause } => {
                Error::invalid(field, format!("the message does not decode: {cause}"))
            }
        }
    }
}

impl WireError {
    /// The status the client is answered with.
    fn status(self) -> Status {
        to_status(&self.into())
    }
}

/// Why a request message of `len` bytes, over the `max` the server
/// decodes, is refused, given the first bytes of it in `head` (all of them
/// that will come when `complete`); `None` when more bytes are needed to
/// tell.
fn oversize(
    shape: Option<&Shape>,
    head: &[u8],
    len: usize,
    max: usize,
    complete: bool,
) -> Option<WireError> {
    let Some(shape) = shape else {
        return Some(WireError::OverLimit { len, max });
    };
    match find_fault(shape, head, max, "") {
        Fault::Over { field, len, limit } => Some(WireError::FieldOverLimit { field, len, limit }),
        Fault::Carries { field, repeated } => Some(WireError::CarriedOverLimit {
            field,
            repeated,
            len,
            max,
        }),
        Fault::NeedMore if !complete => None,
        Fault::NeedMore | Fault::Unknown => Some(WireError::OverLimit { len, max }),
    }
}

/// The prefix of prost's description of a message that did not decode, as
/// tonic reports it (status INTERNAL).
const DECODE_FAILED: &str = "failed to decode Protobuf message: ";

/// What a status tonic made while reading a request says of its message:
/// [`WireError::Undecodable`] when prost could not decode it; `None` for
/// any other status (the guard's own refusals among them, and a broken
/// stream), which is passed on as it is.
///
/// The one function that reads prost's words: tonic hands prost's
/// `DecodeError` on only as the text of an INTERNAL status, and prost keeps
/// the error's kind and its stack of fields private. The text names each
/// message and field it was in, innermost first, then the cause:
/// `CheckedWriteRequest.job: WriteStreamRequest.writes: invalid string
/// value: data is not UTF-8 encoded` is field `writes.job`.
fn undecodable(status: &Status) -> Option<WireError> {
    if status.code() != Code::Internal {
        return None;
    }
    let mut rest = status.message().strip_prefix(DECODE_FAILED)?;
    let mut fields = Vec::new();
    while let Some((frame, tail)) = rest.split_once(": ") {
        let Some((message, field)) = frame.split_once('.') else {
            break;
        };
        let ident =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident(message) || !ident(field) {
            break;
        }
        fields.push(field);
        rest = tail;
    }
    fields.reverse();
    Some(WireError::Undecodable {
        field: fields.join("."),
        cause: rest.to_owned(),
    })
}

/// A status a request stream's `message()` returned, in the server's terms:
/// a message that did not decode becomes INVALID_ARGUMENT naming the field;
/// anything else (the guard's own errors among them) is kept.
pub fn request_error(status: Status) -> Status {
    match undecodable(&status) {
        Some(e) => e.status(),
        None => status,
    }
}

/// Guards every leasehold call: its request body goes through a
/// [`FrameGuard`], and a unary reply that says its request did not decode
/// is put in the server's terms.
#[derive(Clone)]
pub struct WireLayer {
    schema: Arc<Schema>,
    max: usize,
}

impl WireLayer {
    /// A layer for the methods of `schema`, refusing messages over `max`
    /// bytes.
    pub fn new(schema: Schema, max: usize) -> Self {
        WireLayer {
            schema: Arc::new(schema),
            max,
        }
    }
}

impl<S> Layer<S> for WireLayer {
    type Service = Wire<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Wire {
            inner,
            schema: self.schema.clone(),
            max: self.max,
        }
    }
}

/// The service made by [`WireLayer`].
#[derive(Clone)]
pub struct Wire<S> {
    inner: S,
    schema: Arc<Schema>,
    max: usize,
}

impl<S, R> Service<http::Request<Body>> for Wire<S>
where
    S: Service<http::Request<Body>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(shape) = self.schema.request(req.uri().path()).cloned() else {
            // Health and reflection: tonic's own limits and errors.
            return Box::pin(inner.call(req));
        };
        let max = self.max;
        let req = req.map(|body| Body::new(FrameGuard::new(body, Some(shape), max)));
        Box::pin(async move {
            let resp = inner.call(req).await?;
            // tonic answers a unary request that did not decode before any
            // handler runs, with the status in the headers alone.
            let code = resp
                .headers()
                .get("grpc-status")
                .map(|v| Code::from_bytes(v.as_bytes()));
            if code == Some(Code::Internal) {
                if let Some(e) = Status::from_header_map(resp.headers())
                    .as_ref()
                    .and_then(undecodable)
                {
                    return Ok(e.status().into_http());
                }
            }
            Ok(resp)
        })
    }
}

/// Where a [`FrameGuard`] is in the gRPC framing of its body: each message
/// is a one-byte compression flag, a four-byte big-endian length, then the
/// message.
enum Framing {
    /// Reading a message's prefix; `have` of its five bytes so far.
    Prefix { prefix: [u8; 5], have: usize },
    /// Handing on the `left` bytes still to come of an accepted message.
    Message { left: usize },
    /// Reading the start of a message of `len` bytes, too large to accept.
    TooLarge {
        compressed: bool,
        len: usize,
        head: BytesMut,
    },
    /// Refused: nothing more is read.
    Refused,
}

/// A request body that hands on every message up to the size limit as it
/// comes, and stops at a message over it with the error that names why
/// (see the module docs). It holds at most the limit's worth of bytes.
pub struct FrameGuard {
    inner: Body,
    shape: Option<Arc<Shape>>,
    max: usize,
    framing: Framing,
    /// The error to yield once the bytes before it are handed on.
    refusal: Option<Status>,
}

impl FrameGuard {
    /// Guards `inner`, a request body of a method whose request message has
    /// `shape`, refusing messages over `max` bytes.
    fn new(inner: Body, shape: Option<Arc<Shape>>, max: usize) -> Self {
        FrameGuard {
            inner,
            shape,
            max,
            framing: Framing::Prefix {
                prefix: [0; 5],
                have: 0,
            },
            refusal: None,
        }
    }

    /// Follows the framing through `data`; returns the part of it to hand
    /// on. A message too large is held back from its prefix on (a prefix
    /// cut across chunks may be handed on in part: tonic never reads a
    /// partial prefix), and once its fault is known it is in `refusal`.
    fn take(&mut self, data: Bytes, complete: bool) -> Bytes {
        let mut i = 0;
        let mut pass = data.len();
        while i < data.len() {
            match &mut self.framing {
                Framing::Prefix { prefix, have } => {
                    let start = i;
                    let n = (5 - *have).min(data.len() - i);
                    prefix[*have..*have + n].copy_from_slice(&data[i..i + n]);
                    *have += n;
                    i += n;
                    if *have < 5 {
                        continue;
                    }
                    let len =
                        u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
                    if len > self.max {
                        pass = start;
                        self.framing = Framing::TooLarge {
                            compressed: prefix[0] != 0,
                            len,
                            head: BytesMut::new(),
                        };
                    } else {
                        self.framing = Framing::Message { left: len };
                    }
                }
                Framing::Message { left } => {
                    let n = (*left).min(data.len() - i);
                    *left -= n;
                    i += n;
                    if *left == 0 {
                        self.framing = Framing::Prefix {
                            prefix: [0; 5],
                            have: 0,
                        };
                    }
                }
                Framing::TooLarge { head, .. } => {
                    pass = pass.min(i);
                    let n = (self.max - head.len()).min(data.len() - i);
                    head.extend_from_slice(&data[i..i + n]);
                    // The rest is never read.
                    i = data.len();
                }
                Framing::Refused => return Bytes::new(),
            }
        }
        self.judge(complete);
        data.slice(..pass)
    }

    /// Decides a message too large, once enough of it is known.
    fn judge(&mut self, complete: bool) {
        let Framing::TooLarge {
            compressed,
            len,
            head,
        } = &self.framing
        else {
            return;
        };
        // A compressed message's bytes say nothing of its fields.
        let shape = self.shape.as_deref().filter(|_| !compressed);
        let complete = complete || head.len() >= self.max;
        if let Some(e) = oversize(shape, head, *len, self.max, complete) {
            self.refusal = Some(e.status());
            self.framing = Framing::Refused;
        }
    }
}

impl http_body::Body for FrameGuard {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(status) = self.refusal.take() {
                return Poll::Ready(Some(Err(status)));
            }
            if let Framing::Refused = self.framing {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    // The client ended the body inside a message too
                    // large: judge what came.
                    self.judge(true);
                    if self.refusal.is_some() {
                        continue;
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    let pass = self.take(data, false);
                    if !pass.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(pass))));
                    }
                }
                Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.framing {
            Framing::Refused => self.refusal.is_none(),
            // A body that ends here still has its refusal to yield.
            Framing::TooLarge { .. } => false,
            Framing::Prefix { .. } | Framing::Message { .. } => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;
    use http_body_util::BodyExt;

    fn schema(limits: &Limits) -> Schema {
        Schema::new(proto::FILE_DESCRIPTOR_SET, limits).unwrap()
    }

    fn shape(s: &Schema, path: &str) -> Arc<Shape> {
        s.request(path).cloned().unwrap()
    }

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut f = vec![0];
        f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        f.extend_from_slice(msg);
        f
    }

    /// Feeds `chunks` through a guard of `path` with limit `max`; returns
    /// the bytes handed on and the error, if any.
    async fn guard(path: &str, max: usize, chunks: Vec<Vec<u8>>) -> (Vec<u8>, Option<Status>) {
        let s = schema(&Limits::default());
        let stream = tokio_stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Status>(Frame::data(Bytes::from(c)))),
        );
        let body = Body::new(http_body_util::StreamBody::new(stream));
        let mut g = FrameGuard::new(body, Some(shape(&s, path)), max);
        let mut out = Vec::new();
        loop {
            match g.frame().await {
                None => return (out, None),
                Some(Ok(f)) => out.extend_from_slice(&f.into_data().unwrap()),
                Some(Err(st)) => return (out, Some(st)),
            }
        }
    }

    fn field_of(st: &Status) -> String {
        use tonic_types::StatusExt;
        let info = st.get_error_details().error_info().cloned();
        info.and_then(|i| i.metadata.get("field").cloned())
            .unwrap_or_default()
    }

    const WRITE: &str = "/leasehold.v1.FencedStore/CheckedWrite";
    const STREAM: &str = "/leasehold.v1.FencedStore/WriteStream";

    fn write(value: usize) -> proto::CheckedWriteRequest {
        proto::CheckedWriteRequest {
            proof: Default::default(),
            job: "j".into(),
            token: 1,
            key: b"k".to_vec(),
            value: vec![1; value],
            delete: false,
        }
    }

    #[tokio::test]
    async fn messages_within_the_limit_pass_unchanged_however_they_are_cut() {
        let mut bytes = frame(&write(100).encode_to_vec());
        bytes.extend(frame(&[]));
        bytes.extend(frame(&write(3).encode_to_vec()));
        for cut in [1, 2, 3, 5, 7, 64, bytes.len()] {
            let chunks = bytes.chunks(cut).map(<[u8]>::to_vec).collect();
            let (out, err) = guard(STREAM, 1000, chunks).await;
            assert!(err.is_none(), "{err:?}");
            assert_eq!(out, bytes, "cut every {cut}");
        }
    }

    #[tokio::test]
    async fn a_message_too_large_is_held_back_and_named_after_those_before_it() {
        let ok = frame(
            &proto::WriteStreamRequest {
                id: 1,
                writes: vec![write(10)],
            }
            .encode_to_vec(),
        );
        let big = frame(
            &proto::WriteStreamRequest {
                id: 2,
                writes: (0..20).map(|_| write(600)).collect(),
            }
            .encode_to_vec(),
        );
        let mut bytes = ok.clone();
        bytes.extend(&big);
        for cut in [1, 4, 5, 6, 100, bytes.len()] {
            let chunks = bytes.chunks(cut).map(<[u8]>::to_vec).collect();
            let (out, err) = guard(STREAM, 2000, chunks).await;
            let err = err.expect("refused");
            assert_eq!(err.code(), Code::InvalidArgument);
            assert_eq!(field_of(&err), "writes", "{err:?}");
            assert!(err.message().contains("the limit is 2000 bytes"), "{err:?}");
            // What was handed on is the first message, and at most a part
            // of the second's prefix: never all of it.
            assert_eq!(out[..ok.len()], ok[..], "cut every {cut}");
            assert!(out.len() < ok.len() + 5, "cut every {cut}");
        }
    }

    #[tokio::test]
    async fn the_field_over_its_own_limit_is_named_even_inside_a_write() {
        let (_, err) = guard(WRITE, 2000, vec![frame(&write(70_000).encode_to_vec())]).await;
        let err = err.unwrap();
        assert_eq!(field_of(&err), "value");
        assert!(
            err.message()
                .contains("is 70000 bytes, the limit is 65536 bytes"),
            "{err:?}"
        );
        let msg = proto::WriteStreamRequest {
            id: 1,
            writes: vec![write(10), write(70_000)],
        };
        let (_, err) = guard(STREAM, 2000, vec![frame(&msg.encode_to_vec())]).await;
        let err = err.unwrap();
        assert_eq!(field_of(&err), "writes.value", "{err:?}");
        assert!(err.message().contains("65536"), "{err:?}");
    }

    /// A length prefix of 4 GiB with a few bytes behind it: the guard answers
    /// from those bytes, and never waits for, or holds, the rest.
    #[tokio::test]
    async fn a_huge_length_is_answered_from_the_first_bytes() {
        let mut head = vec![0, 0xff, 0xff, 0xff, 0xff];
        // job "j", token 1, then a value said to be 4 GiB long.
        head.extend([0x0a, 1, b'j', 0x10, 1, 0x22, 0xf0, 0xff, 0xff, 0xff, 0x0f]);
        let (out, err) = guard(WRITE, 2000, vec![head]).await;
        assert!(out.is_empty());
        let err = err.unwrap();
        assert_eq!(field_of(&err), "value");
        assert!(err.message().contains("is 4294967280 bytes"), "{err:?}");
        // Bytes that are not a message: refused, naming no field.
        let (_, err) = guard(WRITE, 2000, vec![vec![0, 0, 1, 0, 0, 0xff, 0xff]]).await;
        let err = err.unwrap();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(field_of(&err), "");
        assert!(err.message().contains("the limit is 2000 bytes"), "{err:?}");
    }

    /// prost's error for `msg` with the bytes of its string `bad` made
    /// invalid UTF-8, as tonic reports it.
    fn not_utf8<M: prost::Message + Default + std::fmt::Debug>(msg: &M, bad: &[u8]) -> Status {
        let mut bytes = msg.encode_to_vec();
        let at = bytes.windows(bad.len()).position(|w| w == bad).unwrap();
        bytes[at..at + bad.len()].fill(0xff);
        Status::internal(M::decode(bytes.as_slice()).unwrap_err().to_string())
    }

    const NOT_UTF8: &str = "invalid string value: data is not UTF-8 encoded";

    #[test]
    fn undecodable_reads_the_field_path_prost_reports() {
        let nested = proto::WriteStreamRequest {
            id: 1,
            writes: vec![proto::CheckedWriteRequest {
                job: "~BAD~".into(),
                ..Default::default()
            }],
        };
        let top = proto::AcquireRequest {
            job: "~BAD~".into(),
            ..Default::default()
        };
        for (status, field) in [
            (not_utf8(&nested, b"~BAD~"), "writes.job"),
            (not_utf8(&top, b"~BAD~"), "job"),
        ] {
            let expected = WireError::Undecodable {
                field: field.into(),
                cause: NOT_UTF8.into(),
            };
            assert_eq!(undecodable(&status), Some(expected), "{status:?}");
        }
    }

    #[test]
    fn undecodable_names_no_field_for_bytes_that_are_not_protobuf() {
        let e = proto::AcquireRequest::decode(&[0xff, 0xff][..]).unwrap_err();
        let Some(WireError::Undecodable { field, cause }) =
            undecodable(&Status::internal(e.to_string()))
        else {
            panic!("{e}")
        };
        assert_eq!(field, "");
        assert!(
            !cause.is_empty() && !cause.contains(DECODE_FAILED),
            "{cause}"
        );
    }

    #[test]
    fn undecodable_passes_on_any_other_status() {
        assert_eq!(undecodable(&Status::internal("something else")), None);
        assert_eq!(
            undecodable(&Status::unavailable(format!("{DECODE_FAILED}A.b: c"))),
            None
        );
        let refused = WireError::OverLimit { len: 9, max: 2 }.status();
        assert_eq!(undecodable(&refused), None);
        assert_eq!(request_error(refused.clone()).message(), refused.message());
    }

    /// The words a client is answered with, for `e`.
    fn words(e: WireError) -> (String, String) {
        match Error::from(e) {
            Error::InvalidArgument { field, message } => (field.into_owned(), message),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_field_over_its_limit_is_worded_as_limits_words_it() {
        let e = WireError::FieldOverLimit {
            field: "writes.value".into(),
            len: 70_000,
            limit: 65_536,
        };
        assert_eq!(
            words(e),
            (
                "writes.value".into(),
                "is 70000 bytes, the limit is 65536 bytes".into()
            )
        );
    }

    #[test]
    fn a_field_carrying_the_message_over_is_named_with_a_hint_when_repeated() {
        let carried = |repeated| WireError::CarriedOverLimit {
            field: "writes".into(),
            repeated,
            len: 2400,
            max: 2000,
        };
        assert_eq!(
            words(carried(true)),
            (
                "writes".into(),
                "the message is 2400 bytes, the limit is 2000 bytes: send fewer writes per message"
                    .into()
            )
        );
        assert_eq!(
            words(carried(false)),
            (
                "writes".into(),
                "the message is 2400 bytes, the limit is 2000 bytes".into()
            )
        );
    }

    #[test]
    fn a_message_over_the_limit_that_names_no_field() {
        assert_eq!(
            words(WireError::OverLimit { len: 9, max: 2 }),
            (
                String::new(),
                "the message is 9 bytes, the limit is 2 bytes".into()
            )
        );
    }

    #[test]
    fn a_message_that_does_not_decode_is_worded_with_prosts_cause() {
        let e = WireError::Undecodable {
            field: "writes.job".into(),
            cause: NOT_UTF8.into(),
        };
        assert_eq!(
            words(e),
            (
                "writes.job".into(),
                format!("the message does not decode: {NOT_UTF8}")
            )
        );
    }

    #[test]
    fn oversize_finds_each_reason() {
        let s = schema(&Limits::default());
        let (one, many_shape) = (shape(&s, WRITE), shape(&s, STREAM));
        let big = write(70_000).encode_to_vec();
        assert_eq!(
            oversize(Some(&one), &big[..2000], big.len(), 2000, false),
            Some(WireError::FieldOverLimit {
                field: "value".into(),
                len: 70_000,
                limit: 65_536,
            })
        );
        let many = proto::WriteStreamRequest {
            id: 1,
            writes: (0..20).map(|_| write(600)).collect(),
        }
        .encode_to_vec();
        assert_eq!(
            oversize(Some(&many_shape), &many[..2000], many.len(), 2000, false),
            Some(WireError::CarriedOverLimit {
                field: "writes".into(),
                repeated: true,
                len: many.len(),
                max: 2000,
            })
        );
        assert_eq!(
            oversize(None, &[], 9, 2, false),
            Some(WireError::OverLimit { len: 9, max: 2 })
        );
        // The first bytes tell nothing yet: more are needed, unless no
        // more will come.
        assert_eq!(
            oversize(Some(&one), &big[..1], big.len(), 2000, false),
            None
        );
        assert_eq!(
            oversize(Some(&one), &big[..1], big.len(), 2000, true),
            Some(WireError::OverLimit {
                len: big.len(),
                max: 2000
            })
        );
    }

    #[test]
    fn every_method_has_its_request_shape() {
        let s = schema(&Limits::default());
        for m in [
            "/leasehold.v1.Leases/Acquire",
            "/leasehold.v1.Leases/KeepAlive",
            "/leasehold.v1.Leases/ListLeases",
            "/leasehold.v1.FencedStore/CheckedWrite",
            "/leasehold.v1.FencedStore/ListKeys",
        ] {
            assert!(s.request(m).is_some(), "{m}");
        }
        let w = shape(&s, STREAM);
        let writes = &w.fields[&2];
        assert_eq!(writes.name, "writes");
        assert!(writes.repeated);
        let value = &writes.message.as_ref().unwrap().fields[&4];
        assert_eq!((value.name.as_str(), value.limit), ("value", Some(65536)));
        let list = shape(&s, "/leasehold.v1.Leases/ListLeases");
        assert_eq!(list.fields[&1].limit, Some(256), "a job prefix");
        let keys = shape(&s, "/leasehold.v1.FencedStore/ListKeys");
        assert_eq!(keys.fields[&2].limit, Some(1024), "a key prefix");
    }
}
