//! The one place that knows the body encoding of typed queues (bincode 2, standard
//! configuration: little-endian, variable-length integers). bincode 2.0.1 is pinned and no
//! longer maintained; swapping it means changing only this module.

use bincode::config::{self, Config};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Encodes `value` as a message body.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, config::standard())
        .map_err(|e| Error::Codec(format!("encoding failed: {e}")))
}

/// Decodes a whole body; trailing bytes are an error.
///
/// A damaged length prefix must not make the decoder allocate gigabytes (that aborts the
/// process rather than failing: bincode allocates a string or byte vector before reading it),
/// so the bytes it may claim are limited to a multiple of the body's size. The factor covers
/// the widest in-memory growth of a legitimate encoding (a one-byte varint decoding to a
/// 16-byte integer). The limit is a type parameter, hence the ladder; its top rung covers the
/// largest body a queue accepts (`max_message_size` is below 4 GiB), and a larger body is
/// refused rather than decoded without a limit.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    const GROWTH: usize = 16;
    let claim = body.len().saturating_mul(GROWTH).max(1024);
    let base = config::standard();
    let r = if claim <= 1 << 16 {
        run(body, base.with_limit::<{ 1 << 16 }>())
    } else if claim <= 1 << 20 {
        run(body, base.with_limit::<{ 1 << 20 }>())
    } else if claim <= 1 << 24 {
        run(body, base.with_limit::<{ 1 << 24 }>())
    } else if claim <= 1 << 28 {
        run(body, base.with_limit::<{ 1 << 28 }>())
    } else if claim <= 1 << 30 {
        run(body, base.with_limit::<{ 1 << 30 }>())
    } else {
        decode_large(body, claim)?
    };
    let (value, used) = r.map_err(|e| Error::Codec(e.to_string()))?;
    if used != body.len() {
        return Err(Error::Codec(format!(
            "{} trailing bytes after the value",
            body.len() - used
        )));
    }
    Ok(value)
}

type Decoded<T> = std::result::Result<(T, usize), bincode::error::DecodeError>;

/// The rungs of [`decode`]'s ladder past 1 GiB, which only 64-bit targets can spell.
#[cfg(target_pointer_width = "64")]
fn decode_large<T: DeserializeOwned>(body: &[u8], claim: usize) -> Result<Decoded<T>> {
    let base = config::standard();
    Ok(if claim <= 1 << 32 {
        run(body, base.with_limit::<{ 1 << 32 }>())
    } else if claim <= 1 << 34 {
        run(body, base.with_limit::<{ 1 << 34 }>())
    } else if claim <= 1 << 36 {
        run(body, base.with_limit::<{ 1 << 36 }>())
    } else {
        return Err(too_large(body));
    })
}

#[cfg(not(target_pointer_width = "64"))]
fn decode_large<T: DeserializeOwned>(body: &[u8], _claim: usize) -> Result<Decoded<T>> {
    Err(too_large(body))
}

fn too_large(body: &[u8]) -> Error {
    Error::Codec(format!(
        "a body of {} bytes is too large to decode (the limit is 4 GiB)",
        body.len()
    ))
}

fn run<T: DeserializeOwned, C: Config>(body: &[u8], c: C) -> Decoded<T> {
    let seed = depth::Seed {
        value: std::marker::PhantomData::<T>,
        left: depth::MAX_DEPTH,
    };
    bincode::serde::seed_decode_from_slice(seed, body, c)
}

/// A limit on how deep a decoded value nests. bincode has none: a recursive type (a tree, a
/// linked list) decodes a level per byte or two, so a body of a few hundred KiB overflowed the
/// receiver's stack and aborted the process. Every nested value passes through these wrappers,
/// which count the levels left and fail past [`depth::MAX_DEPTH`].
mod depth {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{
        self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess,
        Visitor,
    };

    /// As serde_json's limit, so that a typed body may nest as deep in either codec.
    pub const MAX_DEPTH: usize = 128;

    fn deeper<E: de::Error>(left: usize) -> Result<usize, E> {
        left.checked_sub(1)
            .ok_or_else(|| E::custom(format!("the value nests deeper than {MAX_DEPTH} levels")))
    }

    /// Decodes a `T` with `left` levels to go.
    pub struct Seed<T> {
        pub value: PhantomData<T>,
        pub left: usize,
    }

    impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Seed<T> {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            T::deserialize(Depth {
                inner: d,
                left: self.left,
            })
        }
    }

    /// A seed handed to an access (elements, keys, values, variants).
    struct Nested<S> {
        inner: S,
        left: usize,
    }

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Nested<S> {
        type Value = S::Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
            self.inner.deserialize(Depth {
                inner: d,
                left: self.left,
            })
        }
    }

    struct Depth<D> {
        inner: D,
        left: usize,
    }

    macro_rules! forward {
        ($($method:ident $(($($arg:ident: $ty:ty),*))?;)*) => {$(
            fn $method<V: Visitor<'de>>(self, $($($arg: $ty,)*)? visitor: V)
                -> Result<V::Value, D::Error>
            {
                self.inner.$method($($($arg,)*)? Visit { inner: visitor, left: self.left })
            }
        )*};
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Depth<D> {
        type Error = D::Error;
        forward! {
            deserialize_any; deserialize_bool; deserialize_i8; deserialize_i16; deserialize_i32;
            deserialize_i64; deserialize_i128; deserialize_u8; deserialize_u16; deserialize_u32;
            deserialize_u64; deserialize_u128; deserialize_f32; deserialize_f64;
            deserialize_char; deserialize_str; deserialize_string; deserialize_bytes;
            deserialize_byte_buf; deserialize_option; deserialize_unit;
            deserialize_unit_struct(name: &'static str);
            deserialize_newtype_struct(name: &'static str);
            deserialize_seq; deserialize_tuple(len: usize);
            deserialize_tuple_struct(name: &'static str, len: usize);
            deserialize_map;
            deserialize_struct(name: &'static str, fields: &'static [&'static str]);
            deserialize_enum(name: &'static str, variants: &'static [&'static str]);
            deserialize_identifier; deserialize_ignored_any;
        }
        fn is_human_readable(&self) -> bool {
            self.inner.is_human_readable()
        }
    }

    struct Visit<V> {
        inner: V,
        left: usize,
    }

    macro_rules! pass {
        ($($method:ident($ty:ty);)*) => {$(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*};
    }

    impl<'de, V: Visitor<'de>> Visitor<'de> for Visit<V> {
        type Value = V::Value;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.inner.expecting(f)
        }
        pass! {
            visit_bool(bool); visit_i8(i8); visit_i16(i16); visit_i32(i32); visit_i64(i64);
            visit_i128(i128); visit_u8(u8); visit_u16(u16); visit_u32(u32); visit_u64(u64);
            visit_u128(u128); visit_f32(f32); visit_f64(f64); visit_char(char);
            visit_str(&str); visit_borrowed_str(&'de str); visit_string(String);
            visit_bytes(&[u8]); visit_borrowed_bytes(&'de [u8]); visit_byte_buf(Vec<u8>);
        }
        fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
            self.inner.visit_none()
        }
        fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
            self.inner.visit_unit()
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
            let left = deeper(self.left)?;
            self.inner.visit_some(Depth { inner: d, left })
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
            let left = deeper(self.left)?;
            self.inner.visit_newtype_struct(Depth { inner: d, left })
        }
        fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
            let left = deeper(self.left)?;
            self.inner.visit_seq(Access { inner: a, left })
        }
        fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
            let left = deeper(self.left)?;
            self.inner.visit_map(Access { inner: a, left })
        }
        fn visit_enum<A: EnumAccess<'de>>(self, a: A) -> Result<V::Value, A::Error> {
            let left = deeper(self.left)?;
            self.inner.visit_enum(Access { inner: a, left })
        }
    }

    /// A sequence, map, enum or variant whose parts decode one level deeper.
    struct Access<A> {
        inner: A,
        left: usize,
    }

    impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<A> {
        type Error = A::Error;
        fn next_element_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, A::Error> {
            let left = self.left;
            self.inner.next_element_seed(Nested { inner: seed, left })
        }
        fn size_hint(&self) -> Option<usize> {
            self.inner.size_hint()
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<A> {
        type Error = A::Error;
        fn next_key_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, A::Error> {
            let left = self.left;
            self.inner.next_key_seed(Nested { inner: seed, left })
        }
        fn next_value_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<S::Value, A::Error> {
            let left = self.left;
            self.inner.next_value_seed(Nested { inner: seed, left })
        }
        fn size_hint(&self) -> Option<usize> {
            self.inner.size_hint()
        }
    }

    impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<A> {
        type Error = A::Error;
        type Variant = Access<A::Variant>;
        fn variant_seed<S: DeserializeSeed<'de>>(
            self,
            seed: S,
        ) -> Result<(S::Value, Access<A::Variant>), A::Error> {
            let left = self.left;
            let (value, variant) = self.inner.variant_seed(Nested { inner: seed, left })?;
            Ok((
                value,
                Access {
                    inner: variant,
                    left,
                },
            ))
        }
    }

    impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<A> {
        type Error = A::Error;
        fn unit_variant(self) -> Result<(), A::Error> {
            self.inner.unit_variant()
        }
        fn newtype_variant_seed<S: DeserializeSeed<'de>>(
            self,
            seed: S,
        ) -> Result<S::Value, A::Error> {
            let left = self.left;
            self.inner
                .newtype_variant_seed(Nested { inner: seed, left })
        }
        fn tuple_variant<V: Visitor<'de>>(
            self,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, A::Error> {
            let left = self.left;
            self.inner.tuple_variant(
                len,
                Visit {
                    inner: visitor,
                    left,
                },
            )
        }
        fn struct_variant<V: Visitor<'de>>(
            self,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, A::Error> {
            let left = self.left;
            self.inner.struct_variant(
                fields,
                Visit {
                    inner: visitor,
                    left,
                },
            )
        }
    }
}
