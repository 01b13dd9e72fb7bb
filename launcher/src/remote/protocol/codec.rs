//! The field codecs the message table ([`super`]) is written with, and the macros that turn
//! the table into encode and decode (pure).
//!
//! A [`Codec`] is a value that knows one field's byte form and the words its errors use: an
//! integer ([`Int`]), bytes ([`Bytes`], [`Str`]), a flag ([`Bool`]), a list
//! ([`List`]), an optional value ([`Opt`]), a pair ([`Pair`]), either of two ([`Either`]), or a
//! struct or enum of the table ([`Rec`], through [`Fields`]). The table declares each field
//! once, with its codec; [`record!`] and [`tagged!`] write both directions from that line.

use std::fmt;

/// A frame that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad message from the other side: {}", self.0)
    }
}

impl std::error::Error for WireError {}

/// Builds the body of a frame.
#[derive(Default)]
pub(crate) struct Enc(pub(crate) Vec<u8>);

impl Enc {
    /// A length or count, as a `u32` (lengths are bounded by `MAX_FRAME` when decoding;
    /// encoding longer would be refused there).
    fn count(&mut self, n: usize) {
        self.0
            .extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
    }
}

/// Reads the body of a frame.
pub(crate) struct Dec<'a>(pub(crate) &'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError(format!("frame ends inside {what}")));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Int(what).get(self)
    }

    fn bool(&mut self, what: &str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError(format!("{what}: {b} is not a boolean"))),
        }
    }

    /// A list count, checked against what is left so a lying count cannot make us allocate.
    fn count(&mut self, what: &str, min_item: usize) -> Result<usize, WireError> {
        let n = Codec::<u32>::get(&Int(what), self)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.0.len() {
            return Err(WireError(format!(
                "{what}: {n} items do not fit in the frame"
            )));
        }
        Ok(n)
    }

    /// Nothing may follow a whole message.
    pub(crate) fn end(&self, kind: &str) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError(format!(
                "{} stray byte(s) after a {kind} message",
                self.0.len()
            )))
        }
    }
}

/// Prepends the length to a body.
pub(crate) fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// One field's byte form: how a value of `T` is written, and read back (errors name the field).
pub(crate) trait Codec<T> {
    /// Appends `v`.
    fn put(&self, e: &mut Enc, v: &T);
    /// Reads one value.
    fn get(&self, d: &mut Dec<'_>) -> Result<T, WireError>;
}

/// A struct or enum of the message table: its fields in wire order ([`record!`], [`tagged!`]).
pub(crate) trait Fields: Sized {
    /// Appends the fields.
    fn put_fields(&self, e: &mut Enc);
    /// Reads the fields.
    fn get_fields(d: &mut Dec<'_>) -> Result<Self, WireError>;
}

/// A little-endian integer type.
pub(crate) trait Le: Sized + Copy {
    /// Appends the bytes.
    fn write(self, out: &mut Vec<u8>);
    /// Reads the bytes (`what` names them in an error).
    fn read(d: &mut Dec<'_>, what: &str) -> Result<Self, WireError>;
}

macro_rules! little_endian {
    ($($t:ty),*) => {$(
        impl Le for $t {
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read(d: &mut Dec<'_>, what: &str) -> Result<Self, WireError> {
                Ok(<$t>::from_le_bytes(d.array(what)?))
            }
        }
    )*};
}

little_endian!(u8, u16, u32, i32, u64);

/// An integer, little-endian.
pub(crate) struct Int<'w>(pub(crate) &'w str);

impl<T: Le> Codec<T> for Int<'_> {
    fn put(&self, e: &mut Enc, v: &T) {
        v.write(&mut e.0);
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<T, WireError> {
        T::read(d, self.0)
    }
}

/// A boolean: one byte, 1 for true. [`Bool::strict`] refuses anything but 0 and 1;
/// [`Bool::lax`] reads any byte but 0 as true.
pub(crate) struct Bool {
    what: &'static str,
    strict: bool,
}

impl Bool {
    /// 0 or 1, anything else an error.
    pub(crate) const fn strict(what: &'static str) -> Bool {
        Bool { what, strict: true }
    }

    /// 0 false, anything else true.
    pub(crate) const fn lax(what: &'static str) -> Bool {
        Bool {
            what,
            strict: false,
        }
    }
}

impl Codec<bool> for Bool {
    fn put(&self, e: &mut Enc, v: &bool) {
        e.0.push(u8::from(*v));
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<bool, WireError> {
        if self.strict {
            d.bool(self.what)
        } else {
            Ok(d.u8(self.what)? != 0)
        }
    }
}

/// An output stream: one byte, 0 stdout or 1 stderr.
pub(crate) struct Stream(pub(crate) &'static str);

impl Codec<u8> for Stream {
    fn put(&self, e: &mut Enc, v: &u8) {
        e.0.push(*v);
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<u8, WireError> {
        match d.u8(self.0)? {
            s @ (0 | 1) => Ok(s),
            s => Err(WireError(format!(
                "stream {s} is neither stdout nor stderr"
            ))),
        }
    }
}

/// Bytes: a `u32` length and the bytes.
pub(crate) struct Bytes(pub(crate) &'static str);

impl Codec<Vec<u8>> for Bytes {
    fn put(&self, e: &mut Enc, v: &Vec<u8>) {
        e.count(v.len());
        e.0.extend_from_slice(v);
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<Vec<u8>, WireError> {
        let n = Codec::<u32>::get(&Int(self.0), d)? as usize;
        Ok(d.take(n, self.0)?.to_vec())
    }
}

/// Text: as [`Bytes`], and UTF-8.
pub(crate) struct Str(pub(crate) &'static str);

impl Codec<String> for Str {
    fn put(&self, e: &mut Enc, v: &String) {
        e.count(v.len());
        e.0.extend_from_slice(v.as_bytes());
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<String, WireError> {
        String::from_utf8(Bytes(self.0).get(d)?)
            .map_err(|_| WireError(format!("{} is not UTF-8", self.0)))
    }
}

/// A list: a `u32` count (`what`), then the items; each item takes at least `min_item` bytes,
/// so a count larger than the frame can hold is refused before anything is allocated.
pub(crate) struct List<C>(pub(crate) &'static str, pub(crate) usize, pub(crate) C);

impl<T, C: Codec<T>> Codec<Vec<T>> for List<C> {
    fn put(&self, e: &mut Enc, v: &Vec<T>) {
        e.count(v.len());
        for item in v {
            self.2.put(e, item);
        }
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<Vec<T>, WireError> {
        let n = d.count(self.0, self.1)?;
        (0..n).map(|_| self.2.get(d)).collect()
    }
}

/// An optional value: a boolean (`what`: whether it follows), then the value.
pub(crate) struct Opt<C>(pub(crate) &'static str, pub(crate) C);

impl<T, C: Codec<T>> Codec<Option<T>> for Opt<C> {
    fn put(&self, e: &mut Enc, v: &Option<T>) {
        e.0.push(u8::from(v.is_some()));
        if let Some(v) = v {
            self.1.put(e, v);
        }
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<Option<T>, WireError> {
        Ok(Either(self.0, &self.1, Nothing).get(d)?.ok())
    }
}

/// No bytes at all (the `None` side of [`Opt`]).
struct Nothing;

impl Codec<()> for Nothing {
    fn put(&self, _: &mut Enc, _: &()) {}
    fn get(&self, _: &mut Dec<'_>) -> Result<(), WireError> {
        Ok(())
    }
}

/// A reference to a codec is the same codec.
impl<T, C: Codec<T>> Codec<T> for &C {
    fn put(&self, e: &mut Enc, v: &T) {
        (**self).put(e, v)
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<T, WireError> {
        (**self).get(d)
    }
}

/// Two values, one after the other.
pub(crate) struct Pair<A, B>(pub(crate) A, pub(crate) B);

impl<T, U, A: Codec<T>, B: Codec<U>> Codec<(T, U)> for Pair<A, B> {
    fn put(&self, e: &mut Enc, v: &(T, U)) {
        self.0.put(e, &v.0);
        self.1.put(e, &v.1);
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<(T, U), WireError> {
        Ok((self.0.get(d)?, self.1.get(d)?))
    }
}

/// One of two: a boolean (`what`; 1 for `Ok`), then the `Ok` or the `Err` value.
pub(crate) struct Either<A, B>(pub(crate) &'static str, pub(crate) A, pub(crate) B);

impl<T, U, A: Codec<T>, B: Codec<U>> Codec<Result<T, U>> for Either<A, B> {
    fn put(&self, e: &mut Enc, v: &Result<T, U>) {
        match v {
            Ok(v) => {
                e.0.push(1);
                self.1.put(e, v);
            }
            Err(v) => {
                e.0.push(0);
                self.2.put(e, v);
            }
        }
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<Result<T, U>, WireError> {
        Ok(if d.bool(self.0)? {
            Ok(self.1.get(d)?)
        } else {
            Err(self.2.get(d)?)
        })
    }
}

/// A struct or enum of the table, as its [`Fields`] say.
pub(crate) struct Rec;

impl<T: Fields> Codec<T> for Rec {
    fn put(&self, e: &mut Enc, v: &T) {
        v.put_fields(e);
    }
    fn get(&self, d: &mut Dec<'_>) -> Result<T, WireError> {
        T::get_fields(d)
    }
}

/// A struct's fields in wire order, each with its codec: `record!(T { field: codec, ... })`
/// implements [`Fields`] for `T`.
macro_rules! record {
    ($ty:ident { $($f:ident: $c:expr),* $(,)? }) => {
        impl $crate::remote::protocol::codec::Fields for $ty {
            fn put_fields(&self, e: &mut $crate::remote::protocol::codec::Enc) {
                $( $crate::remote::protocol::codec::Codec::put(&$c, e, &self.$f); )*
            }
            fn get_fields(
                d: &mut $crate::remote::protocol::codec::Dec<'_>,
            ) -> Result<Self, $crate::remote::protocol::codec::WireError> {
                Ok($ty { $( $f: $crate::remote::protocol::codec::Codec::get(&$c, d)? ),* })
            }
        }
    };
}

/// An enum as a one-byte tag and the variant's fields:
/// `tagged!(T, "the tag", |k| error { tag => Variant { field: codec, ... }, tag => Variant(x: codec) })`
/// implements [`Fields`] for `T` (a unit variant is written `Variant {}`); an unknown tag is
/// the error `error` makes of it.
macro_rules! tagged {
    ($ty:ident, $what:literal, $unknown:expr, { $($tag:literal => $var:ident $body:tt),* $(,)? }) => {
        impl $crate::remote::protocol::codec::Fields for $ty {
            fn put_fields(&self, e: &mut $crate::remote::protocol::codec::Enc) {
                match self {
                    $( $crate::remote::protocol::codec::variant!(@pat $ty $var $body) => {
                        e.0.push($tag);
                        $crate::remote::protocol::codec::variant!(@put e $body);
                    } )*
                }
            }
            fn get_fields(
                d: &mut $crate::remote::protocol::codec::Dec<'_>,
            ) -> Result<Self, $crate::remote::protocol::codec::WireError> {
                let unknown: fn(u8) -> String = $unknown;
                let tag: u8 = $crate::remote::protocol::codec::Codec::get(
                    &$crate::remote::protocol::codec::Int($what), d)?;
                Ok(match tag {
                    $( $tag => $crate::remote::protocol::codec::variant!(@get d $ty $var $body), )*
                    k => return Err($crate::remote::protocol::codec::WireError(unknown(k))),
                })
            }
        }
    };
}

/// One variant of a [`tagged!`] enum: its pattern, how it is written, how it is read.
macro_rules! variant {
    (@pat $ty:ident $var:ident { $($f:ident: $c:expr),* $(,)? }) => { $ty::$var { $($f),* } };
    (@pat $ty:ident $var:ident ($f:ident: $c:expr)) => { $ty::$var($f) };
    (@put $e:ident { $($f:ident: $c:expr),* $(,)? }) => {
        $( $crate::remote::protocol::codec::Codec::put(&$c, $e, $f); )*
    };
    (@put $e:ident ($f:ident: $c:expr)) => {
        $crate::remote::protocol::codec::Codec::put(&$c, $e, $f)
    };
    (@get $d:ident $ty:ident $var:ident { $($f:ident: $c:expr),* $(,)? }) => {
        $ty::$var { $( $f: $crate::remote::protocol::codec::Codec::get(&$c, $d)? ),* }
    };
    (@get $d:ident $ty:ident $var:ident ($f:ident: $c:expr)) => {
        $ty::$var($crate::remote::protocol::codec::Codec::get(&$c, $d)?)
    };
}

/// The frame and decode methods of a message type of the table; `$sender` names who sends it
/// (in the error for bytes after a whole message).
macro_rules! message {
    ($ty:ident, $sender:literal) => {
        impl $ty {
            /// The message as one frame.
            pub fn encode(&self) -> Vec<u8> {
                $crate::remote::protocol::codec::frame(&self.body())
            }

            /// The message's frame body (what a relayed message carries).
            pub fn body(&self) -> Vec<u8> {
                let mut e = $crate::remote::protocol::codec::Enc::default();
                $crate::remote::protocol::codec::Fields::put_fields(self, &mut e);
                e.0
            }

            /// Decodes one frame body (without its length).
            pub fn decode(body: &[u8]) -> Result<$ty, $crate::remote::protocol::codec::WireError> {
                let mut d = $crate::remote::protocol::codec::Dec(body);
                let msg = <$ty as $crate::remote::protocol::codec::Fields>::get_fields(&mut d)?;
                d.end($sender)?;
                Ok(msg)
            }
        }
    };
}

pub(crate) use {message, record, tagged, variant};
